package policy

import (
	"errors"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// fallback is a policy's local limiter, which decides in memory, at the
// process's share of the rate, what Redis cannot (WithFailLocal), what this
// process is too busy to ask it in time, and requests whose limiter's keys
// in Redis hold what no limiter writes; and whether Redis fails now for
// some of the policy's keys: the outages (core.Outage) its decisions met,
// each from its start to its end, for the observer and the log. On a Redis
// Cluster an outage is one master's: the keys of the others are decided by
// Redis all along. What the fallback grants is charged to the core
// (core.Limiter.Charge), which writes it into Redis's log as soon as Redis
// answers again.
type fallback struct {
	limiter *localLimiter
	quotas  *quotaShares // a quota policy's, which does not use limiter
	mu      sync.Mutex
	outages map[*core.Outage]bool // those the policy's decisions met, not over
}

func newFallback(maxKeys int) *fallback {
	return &fallback{limiter: newLocalLimiter(maxKeys), outages: map[*core.Outage]bool{}}
}

// failed notes a call that Redis failed (core.ErrUnavailable), with err,
// which names its outage. The fallback starts deciding with the first
// outage the policy meets, and says so once, to the observer; each outage
// is logged once, when it starts and when it ends; the fallback ends with
// the last of them.
func (f *fallback) failed(p *Policy, err error) {
	var o *core.Outage
	if !errors.As(err, &o) {
		return
	}
	f.mu.Lock()
	if f.outages[o] {
		f.mu.Unlock()
		return
	}
	select {
	case <-o.Done():
		f.mu.Unlock()
		return // already over
	default:
	}
	f.outages[o] = true
	if len(f.outages) == 1 && p.observer != nil {
		p.observer.Fallback(p.name, true) // in order with the end, under f.mu
	}
	f.mu.Unlock()
	p.log().Warn("rate limiter: redis cannot decide; limiting in memory at this process's share until it can",
		"policy", p.name, "redis", o.Addr, "err", err)
	go func() {
		<-o.Done()
		f.mu.Lock()
		delete(f.outages, o)
		if len(f.outages) == 0 && p.observer != nil {
			p.observer.Fallback(p.name, false)
		}
		f.mu.Unlock()
		p.log().Info("rate limiter: redis decides again", "policy", p.name, "redis", o.Addr)
	}()
}

// take decides permits on limiter name at rate r, in memory, as at the
// time of grant g, at which Limiter.Charge writes it into Redis's log: the
// windows of Redis's log then count no more than those of the fallback.
func (f *fallback) take(name string, r core.Rate, permits int64, g core.Grant) core.Result {
	at := g.Time()
	if at.IsZero() {
		at = time.Now()
	}
	return f.limiter.Take(name, r, permits, at)
}

// giveBack gives back a grant g of permits on limiter name at rate r that
// take made.
func (f *fallback) giveBack(name string, r core.Rate, permits int64, g core.Grant) {
	if at := g.Time(); !at.IsZero() {
		f.limiter.Give(name, r, permits, at)
	}
}
