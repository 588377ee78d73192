package core

import (
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/internal/lru"
)

// denialCache remembers, per limiter, that a request for some permits was
// denied until a known time at its rate, so that a request for as many
// permits or more, at that rate, is denied again from memory until then,
// without a round trip. This is exact for this algorithm: nothing but an
// expiry (at the time Redis reported), a Release, a refund or a rate
// change frees permits earlier. This Client's own Release, Refund, Settle,
// SetRate, UpdateRate and Delete drop the entry; those of other clients do
// not, so for a denied limiter they take effect here at the reported time
// at the latest. The deadline counts from the moment the request was sent,
// before Redis decided, less the 1 ms resolution of the script's clock
// (Redis decides on whole ms, and the request may have been sent up to 1 ms
// after the start of the ms of the decision), so the cache never denies
// past the exact time: at worst it sends a request that Redis denies again.
//
// It keeps at most its capacity of limiters, the least recently used going
// first, and costs O(1) per call: an expired entry goes when it is next
// read, or when a newer one takes its place.
type denialCache struct {
	m *lru.Map[denial]
	n atomic.Int64 // entries put, less those dropped (not those evicted): 0 skips the lookup
}

type denial struct {
	rate    *rateArgs // the rate it was denied at: &noRate for a stored rate
	permits int64     // the request that was denied
	back    time.Time // the earliest the permits may be back, on the local monotonic clock
	fresh   time.Time // kept until then, or while Redis fails (see denialLife)
	retryAt time.Time // reported retry time: never earlier than the real one
	reset   time.Time // when every permit is back
	res     Result    // the denial as Redis reported it
}

// defaultDenialCache is how many limiters the local denial cache keeps by
// default (WithDenialCache).
const defaultDenialCache = 100_000

// scriptResolution is the resolution of the clock the scripts decide on.
const scriptResolution = time.Millisecond

func newDenialCache(capacity int) *denialCache {
	return &denialCache{m: lru.New[denial](capacity)}
}

// cached says what the denial cache holds for a request.
type cached uint8

const (
	notCached cached = iota
	// deniedCached: a denial that answers the request.
	deniedCached
	// heldCached: a denial kept past denialLife, while Redis answers: the
	// request asks Redis, and the denial stands if Redis does not answer
	// (see held).
	heldCached
)

// get returns the cached denial of a request for permits on name at rate,
// if any. A request for more permits than were denied is denied too, with
// the time when every permit is back as its retry time: the exact one is
// not known, and that one is never early.
func (c *denialCache) get(l *Limiter, rate *rateArgs, permits int64, now time.Time) (Result, cached) {
	return c.lookup(l, rate, permits, now, false)
}

// held returns the denial that the cache keeps for a request that Redis
// did not answer, whatever its age: nothing can have freed its permits
// that this process would know of before they may be back, so a client
// that Redis denied stays denied until its retry time, also in the moments
// before the Client knows that Redis fails.
func (c *denialCache) held(l *Limiter, rate *rateArgs, permits int64, now time.Time) (Result, bool) {
	r, in := c.lookup(l, rate, permits, now, true)
	return r, in == deniedCached
}

// lookup is get, or with anyAge held.
func (c *denialCache) lookup(l *Limiter, rate *rateArgs, permits int64, now time.Time, anyAge bool) (Result, cached) {
	if c.n.Load() <= 0 {
		return Result{}, notCached
	}
	d, _, s := c.m.Lock(l.name, false)
	defer s.Unlock()
	switch {
	case d == nil:
		return Result{}, notCached
	case !now.Before(d.back):
		s.Delete(l.name)
		c.n.Add(-1)
		return Result{}, notCached
	case *d.rate != *rate || permits < d.permits || permits > d.res.Rate.Permits:
		return Result{}, notCached
	case !anyAge && !now.Before(d.fresh) && !l.c.batcherFor(l).node.Load().failing.Load():
		return Result{}, heldCached
	}
	r := d.res
	r.RetryAfter = d.retryAt.Sub(now)
	if permits > d.permits {
		r.RetryAfter = max(r.RetryAfter, d.reset.Sub(now))
	}
	r.ResetAfter = max(d.reset.Sub(now), r.RetryAfter)
	r.Cached = true
	r.at = 0
	return r, deniedCached
}

// denialLife is how long a denial answers at most while Redis answers: a
// reset (Delete) or a change of the permits made by another process
// reaches this one within it, whatever it held as denied. While Redis
// fails, none can, and a denial answers until its permits may be back;
// it is kept until then in any case, for a request that Redis does not
// answer (see held), and dropped when Redis grants the limiter.
const denialLife = time.Second

// put records a denial at rate decided for a request sent at sent, whose
// reply came at received. The cache denies until the earliest time the
// permits can be back, for a second at most while Redis answers
// (denialLife); it reports the latest, counted from the reply, so
// that a caller waiting the reported time is never early. A denial whose
// permits come back within the script's resolution is not worth keeping,
// and one whose retry time is a bound cannot be kept: the permits may be
// back earlier.
func (c *denialCache) put(name string, rate *rateArgs, permits int64, sent, received time.Time, r Result) {
	if r.RetryAfter <= scriptResolution || r.bound {
		return // too soon to keep, or not exact: the permits may be back earlier
	}
	d, added, s := c.m.Lock(name, true)
	if added {
		c.n.Add(1)
	}
	*d = denial{
		rate:    rate,
		permits: permits,
		back:    sent.Add(r.RetryAfter - scriptResolution),
		fresh:   received.Add(denialLife),
		retryAt: received.Add(r.RetryAfter),
		reset:   received.Add(r.ResetAfter),
		res:     r,
	}
	s.Unlock()
}

// drop forgets the denial of name.
func (c *denialCache) drop(name string) {
	if c.n.Load() <= 0 {
		return
	}
	d, _, s := c.m.Lock(name, false)
	if d != nil {
		s.Delete(name)
		c.n.Add(-1)
	}
	s.Unlock()
}
