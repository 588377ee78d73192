-- config.lua: the stored rate, checked by the same rules as every script.
-- Reply: {OK, rate, interval, type, keepAlive}.

local cfg = lib().read_config(0)
if cfg == nil then
  return { NOT_INITIALIZED }
elseif cfg == false then
  return { INVALID_CONFIG }
end
return { OK, cfg[1], cfg[2], tonumber(cfg[3]), cfg[4] }
