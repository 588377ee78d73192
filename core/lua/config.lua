-- config.lua: the stored rate, checked by the same rules as every script.
-- Reply: {OK, rate, interval, type, keepAlive}.

local L = lib()
local cfg, status = L.read_config(0)
if status ~= L.OK then
  return { status }
end
return { L.OK, cfg[1], cfg[2], tonumber(cfg[3]), cfg[4] }
