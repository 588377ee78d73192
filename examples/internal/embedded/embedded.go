// Package embedded starts the Redis that the examples use when REDIS_URL is
// unset: a miniredis in the example's own process, so that an example runs
// without a Redis server. A service is given its Redis instead.
package embedded

import "github.com/alicebob/miniredis/v2"

// Start starts an embedded Redis (miniredis) on a free local port and
// returns its address, host:port, and the function that stops it.
func Start() (addr string, stop func(), err error) {
	mr, err := miniredis.Run()
	if err != nil {
		return "", nil, err
	}
	// Count TTLs down with the wall clock, as Redis does: left to itself,
	// miniredis expires keys only when told to, and an idle client's
	// limiter would then never go away.
	mr.ClockTTL(true)
	return mr.Addr(), mr.Close, nil
}
