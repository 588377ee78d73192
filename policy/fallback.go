package policy

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// probeEvery is how often a policy whose fallback decides asks Redis
// again, with one request.
const probeEvery = time.Second

// fallback is a policy's local fallback (WithFailLocal): an in-memory
// limiter, and whether it decides now.
type fallback struct {
	limiter *localLimiter
	active  atomic.Bool
	probe   atomic.Int64 // unix nanos of the next request that asks Redis
}

func newFallback(maxKeys int) *fallback {
	return &fallback{limiter: newLocalLimiter(maxKeys)}
}

// deciding reports whether the fallback decides this request, rather than
// Redis: while it is active, but for one request a second, which asks
// Redis whether it is back.
func (f *fallback) deciding() bool {
	if !f.active.Load() {
		return false
	}
	now := time.Now().UnixNano()
	next := f.probe.Load()
	return now < next || !f.probe.CompareAndSwap(next, now+int64(probeEvery))
}

// start makes the fallback decide, after a round trip to Redis failed
// with err, and says so once: to the observer and in the log.
func (f *fallback) start(p *Policy, err error) {
	if f.active.CompareAndSwap(false, true) {
		f.probe.Store(time.Now().Add(probeEvery).UnixNano())
		if p.observer != nil {
			p.observer.Fallback(p.name, true)
		}
		slog.Warn("rate limiter: redis cannot decide; limiting in memory at this process's share until it can",
			"policy", p.name, "err", err)
	}
}

// redisBack hands decisions back to Redis, after a round trip succeeded.
func (f *fallback) redisBack(p *Policy) {
	if f.active.Load() && f.active.CompareAndSwap(true, false) {
		if p.observer != nil {
			p.observer.Fallback(p.name, false)
		}
		slog.Info("rate limiter: redis decides again", "policy", p.name)
	}
}

// take decides permits on limiter name at rate r, in memory.
func (f *fallback) take(name string, r core.Rate, permits int64) core.Result {
	return f.limiter.Take(name, r, permits, time.Now())
}
