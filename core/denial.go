package core

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// denialCache remembers, per limiter, that a request for some permits was
// denied until a known time, so that the same request is denied again from
// memory until then without a round trip. This is exact for this algorithm:
// nothing but an expiry (at the time Redis reported), a Release or a rate
// change frees permits earlier. This Client's own Release, SetRate,
// UpdateRate and Delete drop the entry; those of other clients do not, so
// for a denied limiter they take effect here at the reported time at the
// latest. The deadline counts from the moment the request was sent, before
// Redis decided, less the 1 ms resolution of the script's clock (Redis
// decides on whole ms, and the request may have been sent up to 1 ms after
// the start of the ms of the decision), so the cache never denies past the
// exact time: at worst it sends a request that Redis denies again.
type denialCache struct {
	m     sync.Map     // limiter name -> *denial
	n     atomic.Int64 // entries, so an empty cache costs one atomic load
	sweep atomic.Int64 // unix nanos of the next allowed sweep
}

type denial struct {
	permits int64     // the request that was denied
	until   time.Time // denied until then, on the local monotonic clock
	retryAt time.Time // reported retry time: never earlier than the real one
	reset   time.Time // when every permit is back
	res     Result    // the denial as Redis reported it
}

// scriptResolution is the resolution of the clock the scripts decide on.
const scriptResolution = time.Millisecond

// sweepAt is the size above which inserts sweep expired entries (at most
// once a second), bounding the memory of many denied limiters.
const sweepAt = 1024

// get returns the cached denial of a request for permits on name, if any.
func (c *denialCache) get(name string, permits int64, now time.Time) (Result, bool) {
	if c.n.Load() == 0 {
		return Result{}, false
	}
	v, ok := c.m.Load(name)
	if !ok {
		return Result{}, false
	}
	d := v.(*denial)
	if !now.Before(d.until) {
		if c.m.CompareAndDelete(name, v) {
			c.n.Add(-1)
		}
		return Result{}, false
	}
	if permits != d.permits {
		return Result{}, false
	}
	r := d.res
	r.RetryAfter = d.retryAt.Sub(now)
	r.ResetAfter = max(d.reset.Sub(now), r.RetryAfter)
	r.at = 0
	return r, true
}

// put records a denial decided for a request sent at sent, whose reply
// came at received. The cache denies until the earliest time the permits
// can be back; it reports the latest, counted from the reply, so that a
// caller waiting the reported time is never early. A denial whose permits
// come back within the script's resolution is not worth keeping.
func (c *denialCache) put(name string, permits int64, sent, received time.Time, r Result) {
	if r.RetryAfter <= scriptResolution {
		return
	}
	d := &denial{
		permits: permits,
		until:   sent.Add(r.RetryAfter - scriptResolution),
		retryAt: received.Add(r.RetryAfter),
		reset:   received.Add(r.ResetAfter),
		res:     r,
	}
	if _, loaded := c.m.Swap(strings.Clone(name), d); !loaded {
		if c.n.Add(1) > sweepAt {
			c.sweepExpired(received)
		}
	}
}

// drop forgets the denial of name.
func (c *denialCache) drop(name string) {
	if c.n.Load() == 0 {
		return
	}
	if _, ok := c.m.LoadAndDelete(name); ok {
		c.n.Add(-1)
	}
}

func (c *denialCache) sweepExpired(now time.Time) {
	next := c.sweep.Load()
	if now.UnixNano() < next || !c.sweep.CompareAndSwap(next, now.Add(time.Second).UnixNano()) {
		return
	}
	c.m.Range(func(k, v any) bool {
		if !now.Before(v.(*denial).until) && c.m.CompareAndDelete(k, v) {
			c.n.Add(-1)
		}
		return true
	})
}
