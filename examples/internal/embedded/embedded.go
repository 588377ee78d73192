// Package embedded starts the Redis that the examples use when REDIS_URL is
// unset: a miniredis in the example's own process, so that an example runs
// without a Redis server. A service is given its Redis instead.
package embedded

import "github.com/alicebob/miniredis/v2"

// Notice is what an example logs when it starts an embedded Redis.
const Notice = "REDIS_URL is unset: using an embedded Redis (miniredis) to try the example. " +
	"Under load it answers later than the decision timeout, and those requests are limited in memory, " +
	"at this process's share, not exactly. Set REDIS_URL=redis://host:6379 for a Redis server, which processes share."

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
