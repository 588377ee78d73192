package main

import "github.com/redis/go-redis/v9"

// newMemoryRedis returns a Redis that answers the limiter's scripts from
// memory, for the "memory core" variant of scenario e: the adapters' own
// cost without a network round trip. It is nil while package
// github.com/redlimit/redlimit/internal/memredis does not exist; once it
// does, set it to memredis.New and the variant runs.
var newMemoryRedis func() redis.UniversalClient
