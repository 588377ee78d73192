package policy

// This file holds an in-process rate limiter: the fallback a policy limits with
// while Redis cannot decide (WithFailLocal). Each key has a sliding window cut
// into buckets of 1/16 of the interval, with a count of permits per bucket;
// a bucket counts until it is wholly out of the window, so the limiter never
// grants more than the rate in any window of one interval (it may grant a
// little less), and retry times are never early. Keys are kept up to a
// maximum, the least recently used going first, so a flood of new keys
// cannot take the process's memory.

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// buckets is the number of buckets a window spans: the window's own 16 and
// the one it started in, which counts until it is wholly out.
const buckets = 17

// localBytesPerKey is a bound on the memory one key takes, for documentation and
// tests: its state, its map entry and its place in the recency list.
const localBytesPerKey = 256

// localLimiter limits keys in memory, each at the rate given with its requests.
// It is safe for concurrent use.
type localLimiter struct {
	shards [16]localShard
	seed   maphash.Seed
}

type localShard struct {
	mu    sync.Mutex
	keys  map[string]*localKey
	max   int
	head  *localKey // most recently used
	tail  *localKey // least recently used
	count int
}

type localKey struct {
	key        string
	width      int64 // bucket width, ns: 1/16 of the rate's interval
	last       int64 // index of the newest bucket
	counts     [buckets]uint32
	prev, next *localKey
}

// newLocalLimiter returns a limiter that keeps at most maxKeys keys.
func newLocalLimiter(maxKeys int) *localLimiter {
	l := &localLimiter{seed: maphash.MakeSeed()}
	per := max(maxKeys/len(l.shards), 1)
	for i := range l.shards {
		l.shards[i] = localShard{keys: make(map[string]*localKey), max: per}
	}
	return l
}

// Take takes permits for key at time now, at rate r, if they are
// available, and returns the decision as a core.Result. A key whose rate's
// interval changes starts over.
func (l *localLimiter) Take(key string, r core.Rate, permits int64, now time.Time) core.Result {
	s := &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	if w := max(int64(r.Interval)/(buckets-1), 1); w != st.width {
		st.width, st.last, st.counts = w, 0, [buckets]uint32{}
	}
	b := now.UnixNano() / st.width
	st.advance(b)
	var used int64
	for _, c := range st.counts {
		used += int64(c)
	}
	rate := r.Permits
	res := core.Result{Rate: r}
	if used+permits <= rate {
		st.counts[b%buckets] += uint32(permits)
		res.Allowed, res.Remaining = true, rate-used-permits
		res.ResetAfter = st.until(b, now)
		return res
	}
	// The permits come back as the oldest buckets leave the window.
	res.Remaining = max(rate-used, 0)
	freed := int64(0)
	for j := b - buckets + 1; j <= b; j++ {
		freed += int64(st.counts[j%buckets])
		if used-freed+permits <= rate {
			res.RetryAfter = st.until(j, now)
			break
		}
	}
	if res.RetryAfter == 0 { // more than the rate: never
		res.RetryAfter = r.Interval
	}
	res.ResetAfter = max(res.RetryAfter, st.until(b, now))
	return res
}

// until returns the time from now until bucket j is wholly out of the
// window.
func (st *localKey) until(j int64, now time.Time) time.Duration {
	return time.Duration((j+buckets)*st.width - now.UnixNano())
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
func (l *localLimiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}

// get returns the state of key, most recently used now, making room for it
// by dropping the least recently used key when the shard is full. It
// requires that s.mu is held.
func (s *localShard) get(key string) *localKey {
	if st, ok := s.keys[key]; ok {
		s.unlink(st)
		s.push(st)
		return st
	}
	if s.count >= s.max {
		old := s.tail
		s.unlink(old)
		delete(s.keys, old.key)
		s.count--
	}
	st := &localKey{key: key}
	s.keys[key] = st
	s.push(st)
	s.count++
	return st
}

func (s *localShard) push(st *localKey) {
	st.prev, st.next = nil, s.head
	if s.head != nil {
		s.head.prev = st
	}
	s.head = st
	if s.tail == nil {
		s.tail = st
	}
}

func (s *localShard) unlink(st *localKey) {
	if st.prev != nil {
		st.prev.next = st.next
	} else {
		s.head = st.next
	}
	if st.next != nil {
		st.next.prev = st.prev
	} else {
		s.tail = st.prev
	}
	st.prev, st.next = nil, nil
}
