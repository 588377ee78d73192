package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/testkit/memredis"
)

// newMemoryRedis returns a Redis that answers the limiter's scripts from
// memory, for the "memory core" variant of scenario e: the adapters' own
// cost, without a network round trip.
var newMemoryRedis func() redis.UniversalClient = memredis.New
