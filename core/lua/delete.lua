-- delete.lua: removes the limiter's config and this client's state.
-- Stands alone (no lib.lua). Reply: {0 (OK), number of keys deleted}.

return { 0, redis.call('DEL', unpack(KEYS)) }
