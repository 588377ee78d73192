package core

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ledger is what a Client owes Redis, per limiter: grants made without it
// (Limiter.Charge: a local fallback's, while Redis could not decide), and
// settles and refunds that it could not take (Redis failed, or answered too
// late), or that must wait: a refund of a call that got no answer waits
// until its script, should it run late, has run (lateScripts).
//
// A limiter pays what it owes with its next call, first, in the same round
// trip (payments, from send). The ops of one grant go in their order, and
// none goes while an earlier one of its grant may still run: from when a
// payment takes it until Redis answers, or, when Redis did not answer in
// time, until the script could only have run (roundTripGrace past the
// round trip's end). Otherwise a late charge would write a grant back
// after the refund that took it out. What no call takes a writer goroutine pays:
// every flushEvery while Redis answers, and while it fails with the
// Client's probe, once a second; it ends when the ledger is empty. Each op
// is made once however often it is sent (charge.lua), and is dropped once
// its grant's window has passed, when it no longer counts. At most maxOwed
// ops are kept, the oldest going first beyond it.
type ledger struct {
	c      *Client
	n      atomic.Int64 // ops kept: a call reads it before it locks
	mu     sync.Mutex
	keys   map[string]*debts // limiter's first key -> what it owes; nil until the first
	oldest *op               // every op, oldest first (next): the bound drops it
	newest *op
	// flying holds, per grant (see op.grant), until when a payment of
	// its ops may still run (unix ms; math.MaxInt64 while it is out), and
	// nFlying its length, which a settle reads before it locks.
	flying  map[string]int64
	nFlying atomic.Int64
	writing bool // the writer goroutine runs
}

// debts is what one limiter owes, and how to build it again to pay: its
// name (without the Client's key prefix), its rate or quota given in code
// and its call timeout. A limiter is not kept: its keys take more memory
// than its debts. They are kept under the limiter's first key, its name
// (a rate's config) or its counter (a quota's), so that a rate and a quota
// of one name owe apart.
type debts struct {
	key     string // its key in the ledger
	name    string
	coded   *codedRate
	quota   *codedQuota
	timeout time.Duration
	ops     []*op
}

// An op is one change of a limiter's log that Redis has yet to make, as
// charge.lua takes it: member written at its time (a charge), or put in
// place of old (a settle; of 0 permits, a refund). Of a quota, the same
// change of its grant's period's count, as quota.lua takes it.
type op struct {
	member, old string
	at          int64  // the grant's time, Redis's unix ms (Grant.at)
	period      int64  // a quota's grant: its period's start, by Redis's clock; 0 if Redis did not decide it
	due         int64  // local unix ms from which it may be sent
	expires     int64  // local unix ms after which it counts no more; 0: unknown
	d           *debts // the debts it is one of
	prev, next  *op    // its place in the ledger's order
}

// grant returns the member of the grant that o changes.
func (o *op) grant() string {
	if o.old != "" {
		return o.old
	}
	return o.member
}

// maxOwed bounds the ops a Client keeps.
const maxOwed = 100_000

// flushEvery is how often the writer pays the ledger while Redis answers.
const flushEvery = 100 * time.Millisecond

// flushWidth bounds the limiters whose debts the writer pays at once (a
// few, so that a busy process's decisions do not wait behind them), and
// flushTimeout each payment: no request waits for it, and one that times
// out is sent again.
const (
	flushWidth   = 16
	flushTimeout = time.Second
)

// lateScripts is how long after its caller gave up a call's script may
// still run: its round trip goes out up to roundTripGrace past the caller's
// deadline, and Redis runs it as it comes. A refund of such a call waits
// that long (at most half its limiter's window) so that it comes after the
// late grant it gives back: a refund finds only a grant already in the log.
const lateScripts = 2 * roundTripGrace

// owe records that l owes o.
func (q *ledger) owe(l *Limiter, o *op) {
	if o.expires != 0 && o.expires <= time.Now().UnixMilli() {
		return // its window has passed
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.debtsOf(l)
	o.d = d
	q.link(o, q.newest)
	d.ops = append(d.ops, o)
	q.grew(1)
}

// putBack returns ops of l that were taken but not made: they go first in
// l's order, as the oldest, and none of their grants' ops goes before
// until (unix ms; 0: at once).
func (q *ledger) putBack(l *Limiter, ops []*op, until int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.debtsOf(l)
	for i := len(ops) - 1; i >= 0; i-- {
		ops[i].d = d
		q.link(ops[i], nil)
	}
	d.ops = append(append(make([]*op, 0, len(ops)+len(d.ops)), ops...), d.ops...)
	q.landed(ops, until)
	q.grew(len(ops))
}

// landed records that the payment of ops ended: their grants' next ops
// may go from until (unix ms; 0: at once). It requires that q.mu is held.
func (q *ledger) landed(ops []*op, until int64) {
	if until != 0 && q.flying == nil {
		q.flying = map[string]int64{}
	}
	for _, o := range ops {
		if until == 0 {
			delete(q.flying, o.grant())
		} else {
			q.flying[o.grant()] = until
		}
	}
	q.nFlying.Store(int64(len(q.flying)))
}

// holds reports whether the ledger keeps an op on grant g of l, or one may
// still run: a change of g made now must go after it.
func (q *ledger) holds(l *Limiter, g string) bool {
	if q.n.Load() == 0 && q.nFlying.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flying[g] > time.Now().UnixMilli() {
		return true
	}
	if d := q.keys[l.keys[0]]; d != nil {
		for _, o := range d.ops {
			if o.grant() == g {
				return true
			}
		}
	}
	return false
}

// debtsOf returns the debts of l, new ones if it owes nothing. It requires
// that q.mu is held.
func (q *ledger) debtsOf(l *Limiter) *debts {
	if q.keys == nil {
		q.keys = map[string]*debts{}
	}
	d := q.keys[l.keys[0]]
	if d == nil {
		// Its own copies of the names: the limiter's are parts of its keys.
		name := strings.Clone(l.name)
		key := name // a rate's first key
		if l.keys[0] != l.name {
			key = strings.Clone(l.keys[0])
		}
		d = &debts{key: key, name: name[len(q.c.prefix):], coded: l.coded, quota: l.quota, timeout: l.timeout}
		q.keys[key] = d
	}
	return d
}

// grew counts n ops added, drops the oldest beyond the bound, and starts
// the writer. It requires that q.mu is held.
func (q *ledger) grew(n int) {
	for q.n.Add(int64(n)) > maxOwed {
		n = -1
		// The oldest op is the first of its limiter's.
		o := q.oldest
		q.unlink(o)
		d := o.d
		d.ops[0] = nil
		d.ops = d.ops[1:]
		if len(d.ops) == 0 {
			delete(q.keys, d.key)
		}
	}
	if !q.writing {
		q.writing = true
		go q.write()
	}
}

// link puts o in the ledger's order after prev (nil: first). It requires
// that q.mu is held.
func (q *ledger) link(o, prev *op) {
	o.prev = prev
	if prev == nil {
		o.next, q.oldest = q.oldest, o
	} else {
		o.next, prev.next = prev.next, o
	}
	if o.next == nil {
		q.newest = o
	} else {
		o.next.prev = o
	}
}

// unlink takes o out of the ledger's order. It requires that q.mu is held.
func (q *ledger) unlink(o *op) {
	if o.prev == nil {
		q.oldest = o.next
	} else {
		o.prev.next = o.next
	}
	if o.next == nil {
		q.newest = o.prev
	} else {
		o.next.prev = o.prev
	}
	o.prev, o.next = nil, nil
}

// due removes and returns the ops of the limiter whose first key is key
// that may be sent now, in order, as a payment call, or nil. Ops whose
// window has passed go.
func (q *ledger) due(key string, now int64) *call {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.keys[key]
	if d == nil {
		return nil
	}
	var pay []*op
	var held map[string]bool // grants with an op kept: their later ops wait
	gone := 0
	keep := d.ops[:0]
	for _, o := range d.ops {
		g := o.grant()
		switch {
		case o.expires != 0 && o.expires <= now:
			q.unlink(o)
			gone++
		case o.due <= now && q.flying[g] <= now && !held[g]:
			q.unlink(o)
			gone++
			pay = append(pay, o)
		default:
			keep = append(keep, o)
			if held == nil {
				held = map[string]bool{}
			}
			held[g] = true
		}
	}
	clear(d.ops[len(keep):])
	d.ops = keep
	if len(keep) == 0 {
		delete(q.keys, key)
	}
	// Out before no longer kept, for holds, which reads both unlocked.
	if len(pay) > 0 {
		q.landed(pay, math.MaxInt64)
	}
	q.n.Add(-int64(gone))
	if len(pay) == 0 {
		return nil
	}
	// A limiter without a first call (see Client.Limiter): a payment is no acquire.
	return q.c.setUp(new(Limiter), d.name, []LimiterOption{limiterOptionFunc(func(l *Limiter) error {
		l.coded, l.quota, l.timeout = d.coded, d.quota, d.timeout
		return nil
	})}).payment(pay)
}

// payments returns the payment calls of what the limiters of calls owe,
// taken from the ledger, to go first in their round trip.
func (q *ledger) payments(calls []*call) []*call {
	if q.n.Load() == 0 {
		return nil
	}
	var pays []*call
	now := time.Now().UnixMilli()
	for _, cl := range calls {
		if cl.debts != nil {
			continue // a payment itself
		}
		if p := q.due(cl.l.keys[0], now); p != nil {
			pays = append(pays, p)
		}
	}
	return pays
}

// paid ends the payments among calls, which a round trip took: what Redis
// answered, whatever its status (a limiter whose keys hold another type of
// value would fail again), is done. The ops of a payment it did not answer
// (it failed, or this process was too busy) go back, to be sent again, but
// not before its script, written before the round trip ended, if at all,
// has run (see ledger).
func (q *ledger) paid(calls []*call) {
	var until int64
	for _, p := range calls {
		switch {
		case p.debts == nil:
		case p.err != nil && unanswered(p.err):
			if until == 0 {
				until = time.Now().Add(roundTripGrace).UnixMilli()
			}
			q.putBack(p.l, p.debts, until)
		default:
			q.mu.Lock()
			q.landed(p.debts, 0)
			q.mu.Unlock()
		}
	}
}

// unanswered reports whether err says that Redis did not answer a call:
// it failed (refused, or no answer in time), or the call was not sent;
// not an error of the script's own (a limiter's keys holding what no
// limiter wrote, a stored rate missing).
func unanswered(err error) bool {
	if errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrNotInitialized) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply) || refusal(reply.Error())
}

// payment returns the call that makes ops on l's log (or counter).
func (l *Limiter) payment(ops []*op) *call {
	if l.quota != nil {
		return l.quotaPayment(ops)
	}
	args := l.scriptRate().appendTo(make([]any, 0, 4+3*len(ops)))
	for _, o := range ops {
		if o.old == "" {
			args = append(args, o.member, o.at, "")
		} else {
			args = append(args, o.member, "", o.old)
		}
	}
	return &call{l: l, s: scriptCharge, args: args, debts: ops}
}

// write pays the ledger until it is empty. It waits flushEvery first, and
// between payments, so that calls meanwhile carry their limiters' debts.
func (q *ledger) write() {
	for {
		time.Sleep(flushEvery)
		now := time.Now().UnixMilli()
		q.mu.Lock()
		for g, until := range q.flying {
			if until <= now {
				delete(q.flying, g)
			}
		}
		q.nFlying.Store(int64(len(q.flying)))
		if len(q.keys) == 0 && len(q.flying) == 0 {
			q.writing = false
			q.mu.Unlock()
			return
		}
		keys := make([]string, 0, len(q.keys))
		for key := range q.keys {
			keys = append(keys, key)
		}
		q.mu.Unlock()
		var (
			wg     sync.WaitGroup
			closed atomic.Bool
			failed atomic.Bool
			width  = make(chan struct{}, flushWidth)
		)
		for _, key := range keys {
			width <- struct{}{} // first: the check below then sees every payment that gave its slot back
			if failed.Load() || closed.Load() {
				<-width
				break // Redis fails, or this process is too busy: try later; or all is dropped
			}
			p := q.due(key, now)
			if p == nil {
				<-width
				continue // nothing due, or paid by a call meanwhile
			}
			wg.Go(func() {
				defer func() { <-width }()
				ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				defer cancel()
				// Without an answer, the round trip may go on: p is then
				// not ours to read, and the round trip puts its ops back
				// (paid) if it took them.
				sent, err := q.c.do(ctx, p)
				if err == nil {
					err = p.err
				}
				switch {
				case errors.Is(err, redis.ErrClosed):
					// The go-redis client was closed: nothing more can be
					// paid; what is owed is dropped.
					closed.Store(true)
				case err != nil:
					failed.Store(true)
					if !sent {
						q.putBack(p.l, p.debts, 0)
					}
				}
			})
		}
		wg.Wait()
		if closed.Load() {
			q.mu.Lock()
			q.keys, q.oldest, q.newest, q.flying, q.writing = nil, nil, nil, nil, false
			q.n.Store(0)
			q.nFlying.Store(0)
			q.mu.Unlock()
			return
		}
		if failed.Load() {
			time.Sleep(probeEvery - flushEvery)
		}
	}
}
