-- config.lua: the stored config, checked by the same rules as every script.
-- Reply: {code, rate, interval, type, keepAlive}

local L = lib()
local cfg = L.read_config(KEYS[1])
if cfg == nil then
  return { 1 }
elseif cfg == false then
  return { 3 }
end
return { 0, cfg[1], cfg[2], tonumber(cfg[3]), cfg[4] }
