package core

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// deniedBytes bounds the memory one limiter takes in the denial cache: its
// entry, its name and its map slot. It is the figure the documentation of
// WithDenialCache gives (about 350 bytes).
const deniedBytes = 400

// 300 000 denied limiters: the cache keeps its capacity of them, each in
// at most deniedBytes, and each put costs the same whatever the number.
func TestDenialCacheMemory(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	c := newDenialCache(defaultDenialCache)
	rate := newRateArgs(PerMinute(10))
	now := time.Now()
	res := Result{RetryAfter: time.Minute, ResetAfter: time.Minute, Rate: PerMinute(10)}
	for i := range 300_000 {
		// A limiter name as a policy makes it: prefix, policy, client address.
		name := "api:global:10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
		c.put(name, rate, 1, now, now, res)
	}
	used := heap() - before
	kept := c.m.Len()
	runtime.KeepAlive(c)
	t.Logf("300 000 denied limiters: %d kept, %d bytes in all, %d bytes each", kept, used, used/uint64(kept))
	assert.LessOrEqual(t, kept, defaultDenialCache)
	assert.Greater(t, kept, defaultDenialCache*9/10, "a shard drops keys only when full")
	assert.LessOrEqual(t, used, uint64(defaultDenialCache*deniedBytes))
}
