package policy

import (
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// fallback is a policy's local limiter, which decides in memory, at the
// process's share of the rate, what Redis cannot (WithFailLocal), what this
// process is too busy to ask it in time, and requests whose limiter's keys
// in Redis hold what no limiter writes; and whether Redis fails now (the
// local fallback's start and end, for the observer and the log). What it
// grants is charged to the core (core.Limiter.Charge), which writes it into
// Redis's log as soon as Redis answers again.
type fallback struct {
	limiter  *localLimiter
	active   atomic.Bool
	failedAt atomic.Int64 // unix nanos of the last call Redis failed
}

func newFallback(maxKeys int) *fallback {
	return &fallback{limiter: newLocalLimiter(maxKeys)}
}

// failed notes a call that Redis failed (core.ErrUnavailable), with err.
// The fallback starts deciding, and says so once, to the observer and in
// the log.
func (f *fallback) failed(p *Policy, err error) {
	f.failedAt.Store(time.Now().UnixNano())
	if f.active.CompareAndSwap(false, true) {
		if p.observer != nil {
			p.observer.Fallback(p.name, true)
		}
		p.log().Warn("rate limiter: redis cannot decide; limiting in memory at this process's share until it can",
			"policy", p.name, "err", err)
	}
}

// answered notes that Redis decided a call sent at sent. The fallback ends
// when no call failed after it: the answer is Redis's present, not the past
// of a call sent before the failure. Answers from the core's local denial
// cache (core.Result.Cached) are not Redis's: they never come here.
func (f *fallback) answered(p *Policy, sent int64) {
	if f.active.Load() && f.failedAt.Load() < sent && f.active.CompareAndSwap(true, false) {
		if p.observer != nil {
			p.observer.Fallback(p.name, false)
		}
		p.log().Info("rate limiter: redis decides again", "policy", p.name)
	}
}

// take decides permits on limiter name at rate r, in memory.
func (f *fallback) take(name string, r core.Rate, permits int64) core.Result {
	return f.limiter.Take(name, r, permits, time.Now())
}
