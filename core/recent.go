package core

import (
	"sync"
	"time"
)

// recent keeps the grants a Client made in their window, the last
// recentGrants of them, on a deployment whose master can change (a Redis
// Cluster, a Sentinel client): when a limiter's master changes, a Sentinel
// switch-over or a Cluster failover, the grants that reached the old
// master but not yet its replica are lost with it, and the new one would
// grant them again. So when the Client sees its master change (a Sentinel
// client dials a new master; a Cluster slot's master is another node after
// a round trip), it charges the grants it made on that master's keys into
// the new one (Limiter.Charge, which skips what the log holds: those that
// were replicated). A switch-over, and a crash as far as this process
// knows, then costs no grant the processes made.
type recent struct {
	mu   sync.Mutex
	on   bool // a deployment whose master can change
	ring [recentGrants]recentGrant
	next int
}

type recentGrant struct {
	l       *Limiter
	member  member
	at      int64 // Redis's unix ms (Grant.at)
	expires int64 // local unix ms when it leaves its window
}

// recentGrants bounds the grants kept: a process making 10 000 grants a
// second keeps its last 1.6 s, longer than a switch-over takes to reach
// every client. About 48 bytes each, and their limiters (about 1 KB each,
// with the call of their first acquire).
const recentGrants = 16_384

// add keeps a grant made on l at g.at, and returns its place for forget
// (0: not kept).
func (r *recent) add(l *Limiter, g Grant) int32 {
	if !r.on || l.coded == nil {
		return 0 // a stored rate's window is not known here
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.next
	r.ring[i] = recentGrant{l: l, member: g.member, at: g.at, expires: l.expiry(g)}
	r.next = (r.next + 1) % recentGrants
	return int32(i) + 1
}

// forget drops g, given back: a new master is not charged with it.
func (r *recent) forget(g Grant) {
	if g.recent == 0 {
		return
	}
	r.mu.Lock()
	if e := &r.ring[g.recent-1]; e.member == g.member {
		e.l = nil
	}
	r.mu.Unlock()
}

// replay charges the grants still in their window whose limiter match
// accepts into their limiters' (new) master.
func (r *recent) replay(match func(*Limiter) bool) {
	if !r.on {
		return
	}
	now := time.Now().UnixMilli()
	r.mu.Lock()
	var due []recentGrant
	for i := range r.ring { // by index: a range over the array would copy it whole
		if g := &r.ring[i]; g.l != nil && g.expires > now && match(g.l) {
			due = append(due, *g)
		}
	}
	r.mu.Unlock()
	for _, g := range due {
		g.l.Charge(Grant{member: g.member, at: g.at, state: grantUnsent})
	}
}
