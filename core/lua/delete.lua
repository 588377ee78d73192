-- delete.lua: removes the limiter's config and this client's state.
-- Reply: {OK, number of keys deleted}.

return { OK, redis.call('DEL', unpack(KEYS)) }
