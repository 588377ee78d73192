package policy

// This file holds an in-process rate limiter: the fallback a policy limits
// with while Redis cannot decide. Each key has a sliding window cut into
// buckets of 1/16 of the interval, with a count of permits per bucket; a
// bucket counts until it is wholly out of the window, and the bucket of
// the key's newest grant until that grant is, so the limiter never grants
// more than the rate in any window of one interval (it may grant a little
// less), and retry times are never early, nor, for requests decided in the
// order of their times, longer than the interval. A request that costs more
// than the rate is granted alone, in an empty window, and keeps the window
// closed until it leaves it. Keys are kept up to a maximum, the least
// recently used going first, so a flood of new keys cannot take the
// process's memory.

import (
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/lru"
)

// buckets is the number of buckets a window spans: the window's own 16 and
// the one it started in, which counts until it is wholly out.
const buckets = 17

// localBytesPerKey bounds the memory one key takes, as measured
// (TestFallbackKeyFloodIsBounded): its state, its name, its map entry and
// its place in the recency list.
const localBytesPerKey = 320

// localLimiter limits keys in memory, each at the rate given with its
// requests. It is safe for concurrent use.
type localLimiter struct {
	keys *lru.Map[localKey]
}

type localKey struct {
	width  int64 // bucket width, ns: 1/16 of the rate's interval
	last   int64 // index of the newest bucket
	newest int64 // time of the newest grant, unix ns
	// cleared is the time of the newest grant when the counts were last
	// emptied, every grant having left the window.
	cleared int64
	counts  [buckets]uint32
}

// newLocalLimiter returns a limiter that keeps at most maxKeys keys.
func newLocalLimiter(maxKeys int) *localLimiter {
	return &localLimiter{keys: lru.New[localKey](maxKeys)}
}

// Take takes permits for key at time now, at rate r, if they are
// available, and returns the decision as a core.Result. A key whose rate's
// interval changes starts over.
func (l *localLimiter) Take(key string, r core.Rate, permits int64, now time.Time) core.Result {
	st, _, s := l.keys.Lock(key, true)
	defer s.Unlock()
	if w := max(int64(r.Interval)/(buckets-1), 1); w != st.width {
		*st = localKey{width: w}
	}
	t, iv := now.UnixNano(), int64(r.Interval)
	if t < st.cleared+iv {
		// Decided late, as at a time whose window holds grants no longer
		// counted: refused until they leave it.
		wait := time.Duration(st.cleared + iv - t)
		return core.Result{Rate: r, RetryAfter: wait, ResetAfter: wait}
	}
	b := t / st.width
	st.advance(b)
	if t >= st.newest+iv {
		st.counts, st.cleared = [buckets]uint32{}, st.newest // every grant has left the window
	}
	var used int64
	for _, c := range st.counts {
		used += int64(c)
	}
	// A cost above the rate fits an empty window only.
	limit := max(r.Permits, permits)
	res := core.Result{Rate: r}
	if used+permits <= limit {
		st.counts[b%buckets] += uint32(min(permits, core.MaxPermits))
		st.newest = max(st.newest, t)
		res.Allowed, res.Remaining = true, max(r.Permits-used-permits, 0)
		res.ResetAfter = st.until(b, r.Interval, t)
		return res
	}
	// The permits come back as the oldest buckets leave the window.
	res.Remaining = max(r.Permits-used, 0)
	freed := int64(0)
	for j := b - buckets + 1; j <= b; j++ {
		freed += int64(st.counts[j%buckets])
		if used-freed+permits <= limit {
			res.RetryAfter = st.until(j, r.Interval, t)
			break
		}
	}
	res.ResetAfter = max(res.RetryAfter, st.until(b, r.Interval, t))
	return res
}

// Give gives back permits that key took at time at, at rate r (a request
// that a later limit refused), while they are in the window. The newest
// grant's time stays: retry times may stay longer, never early.
func (l *localLimiter) Give(key string, r core.Rate, permits int64, at time.Time) {
	st, _, s := l.keys.Lock(key, false)
	defer s.Unlock()
	if st == nil || st.width != max(int64(r.Interval)/(buckets-1), 1) || at.UnixNano() <= st.cleared {
		return // dropped, its rate changed, or out of the window: its grant is gone
	}
	b := at.UnixNano() / st.width
	if b > st.last || b <= st.last-buckets {
		return // not a bucket of the window
	}
	c := &st.counts[b%buckets]
	*c -= uint32(min(permits, int64(*c)))
}

// until returns the time from t (unix ns) until the grants of bucket j,
// of a window of interval iv, are all out of it: those of an older bucket
// than the newest grant's were made before the bucket ended, and those of
// that grant's bucket no later than it.
func (st *localKey) until(j int64, iv time.Duration, t int64) time.Duration {
	return time.Duration(min((j+1)*st.width, st.newest) + int64(iv) - t)
}

// advance moves the window to bucket b, clearing the buckets it leaves.
func (st *localKey) advance(b int64) {
	if b <= st.last {
		return
	}
	if b-st.last >= buckets {
		st.counts = [buckets]uint32{}
	} else {
		for j := st.last + 1; j <= b; j++ {
			st.counts[j%buckets] = 0
		}
	}
	st.last = b
}

// Len returns the number of keys kept.
func (l *localLimiter) Len() int { return l.keys.Len() }
