package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// fallback is a policy's local fallback (WithFailLocal): an in-memory
// limiter that decides while Redis cannot, and whether it decides now (for
// the observer and the log). What it grants goes into the policy's ledger,
// and from there into Redis's log as soon as Redis answers again.
type fallback struct {
	limiter  *localLimiter
	active   atomic.Bool
	failedAt atomic.Int64 // unix nanos of the last call Redis did not answer
}

func newFallback(maxKeys int) *fallback {
	return &fallback{limiter: newLocalLimiter(maxKeys)}
}

// failed notes a call that Redis did not answer, with err. The fallback
// starts deciding, and says so once, to the observer and in the log, when
// the core says that Redis is failing (core.ErrUnavailable): a call that
// merely timed out, or waited in this process, is decided locally without
// it.
func (f *fallback) failed(p *Policy, err error) {
	f.failedAt.Store(time.Now().UnixNano())
	if errors.Is(err, core.ErrUnavailable) && f.active.CompareAndSwap(false, true) {
		if p.observer != nil {
			p.observer.Fallback(p.name, true)
		}
		p.log().Warn("rate limiter: redis cannot decide; limiting in memory at this process's share until it can",
			"policy", p.name, "err", err)
	}
}

// answered notes that Redis decided a call sent at sent. The fallback ends
// when no call failed after it: the answer is Redis's present, not the past
// of a call sent before the failure. Answers from the local denial cache
// are not Redis's: they never come here.
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

// maxOwed bounds the grants and refunds a policy keeps for Redis: one
// window's worth at most, the least recent going first beyond it.
const maxOwed = fallbackKeys

// flushEvery is how often the ledger is written into Redis while it holds
// something Redis can take.
const flushEvery = 100 * time.Millisecond

// ledger is what a policy owes Redis: the grants its fallback made, and
// refunds (of calls that got no answer in time, or that could not be
// sent), per limiter. A decision on a limiter writes that limiter's first,
// so that Redis counts them before it decides again; and a goroutine
// writes the rest: every 100 ms while Redis takes them (the limiters at
// once, their calls sharing round trips), once a second while Redis fails
// or this process is too busy for the calls (those calls are the Client's
// probes, and find Redis back even without requests). It ends when the
// ledger is empty. Grants are dropped once their window has passed: they
// no longer count. So the goroutine lives at most one window after the
// last grant.
type ledger struct {
	n        atomic.Int64 // entries: a decision reads it before it locks
	mu       sync.Mutex
	keys     map[string]*owed // nil until the first entry
	flushing bool
}

// owed is what one limiter owes.
type owed struct {
	prep    *prepared // the limiter's rate
	grants  []owedGrant
	settles []owedGrant
	refunds []owedGrant
}

type owedGrant struct {
	grant   core.Grant
	at      int64 // unix nanos
	permits int64 // a settle's
}

// addGrant records a grant the fallback made on limiter name.
func (p *Policy) addGrant(name string, prep *prepared, g core.Grant) {
	p.owe(name, prep, func(o *owed) { o.grants = append(o.grants, owedGrant{g, time.Now().UnixNano(), 0}) })
}

// addSettle records a settle to make once Redis can take it.
func (p *Policy) addSettle(name string, prep *prepared, g core.Grant, permits int64) {
	p.owe(name, prep, func(o *owed) { o.settles = append(o.settles, owedGrant{g, time.Now().UnixNano(), permits}) })
}

// addRefund records a refund to make once Redis can take it: of a grant the
// fallback made, of a grant whose refund could not be sent, or of a call
// whose script may run late while the request was refused.
func (p *Policy) addRefund(name string, prep *prepared, g core.Grant) {
	p.owe(name, prep, func(o *owed) { o.refunds = append(o.refunds, owedGrant{g, time.Now().UnixNano(), 0}) })
}

func (p *Policy) owe(name string, prep *prepared, add func(*owed)) {
	l := &p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n.Load() >= maxOwed {
		return // beyond the bound, Redis does not learn of it
	}
	if l.keys == nil {
		l.keys = map[string]*owed{}
	}
	o := l.keys[name]
	if o == nil {
		o = &owed{prep: prep}
		l.keys[name] = o
	}
	add(o)
	l.n.Add(1)
	if !l.flushing {
		l.flushing = true
		go p.flush()
	}
}

// take removes and returns what limiter name owes, or nil.
func (l *ledger) take(name string) *owed {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.keys[name]
	if o != nil {
		delete(l.keys, name)
		l.n.Add(-int64(o.entries()))
	}
	return o
}

// putBack returns what a limiter still owes after a write failed.
func (l *ledger) putBack(name string, o *owed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*owed{}
	}
	if cur := l.keys[name]; cur != nil {
		cur.grants = append(o.grants, cur.grants...)
		cur.settles = append(o.settles, cur.settles...)
		cur.refunds = append(o.refunds, cur.refunds...)
	} else {
		l.keys[name] = o
	}
	l.n.Add(int64(o.entries()))
}

// prune drops what no longer counts: grants (and refunds of grants) whose
// window has passed. It returns the entries it kept.
func (o *owed) prune(now time.Time) int {
	cutoff := now.UnixNano() - int64(o.prep.rate.Interval)
	keep := func(gs []owedGrant) []owedGrant {
		live := gs[:0]
		for _, g := range gs {
			if g.at > cutoff {
				live = append(live, g)
			}
		}
		return live
	}
	o.grants, o.settles, o.refunds = keep(o.grants), keep(o.settles), keep(o.refunds)
	return o.entries()
}

func (o *owed) entries() int { return len(o.grants) + len(o.settles) + len(o.refunds) }

// prune drops what no longer counts from every limiter.
func (l *ledger) prune() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for name, o := range l.keys {
		before := o.entries()
		after := o.prune(now)
		l.n.Add(-int64(before - after))
		if after == 0 {
			delete(l.keys, name)
		}
	}
}

// pay writes what limiter name owes into Redis: its grants still in their
// window, then its settles and its refunds (of grants that may be among
// them, or whose script ran late) once due (see lateScripts). What is not
// due, or is left after a write failed, is put back; the failure is
// returned.
func (p *Policy) pay(ctx context.Context, name string, o *owed) error {
	o.prune(time.Now())
	lim := p.client.Limiter(name, o.prep.limOpts...)
	if len(o.grants) > 0 {
		grants := make([]core.Grant, len(o.grants))
		for i, g := range o.grants {
			grants[i] = g.grant
		}
		if _, err := lim.Charge(ctx, grants...); err != nil {
			p.ledger.putBack(name, o)
			return err
		}
		o.grants = nil
	}
	for len(o.settles) > 0 {
		if _, err := lim.Settle(ctx, o.settles[0].grant, o.settles[0].permits); err != nil {
			p.ledger.putBack(name, o)
			return err
		}
		o.settles = o.settles[1:]
	}
	due := time.Now().Add(-min(lateScripts, o.prep.rate.Interval/2)).UnixNano()
	var later []owedGrant
	for len(o.refunds) > 0 {
		if g := o.refunds[0]; g.at > due {
			later = append(later, g)
		} else if _, err := lim.Refund(ctx, g.grant); err != nil {
			o.refunds = append(o.refunds, later...)
			p.ledger.putBack(name, o)
			return err
		}
		o.refunds = o.refunds[1:]
	}
	if len(later) > 0 {
		p.ledger.putBack(name, &owed{prep: o.prep, refunds: later})
	}
	return nil
}

// lateScripts is how long after its caller gave up a call's script may
// still run: its round trip goes out up to the Client's grace of a second
// past the caller's deadline, and Redis runs it as it comes. A refund in
// the ledger waits that long (at most half its limiter's window) so that it
// comes after the late grant it may give back: a refund finds only a grant
// already in the log, and a grant that comes after it would count.
const lateScripts = 2 * time.Second

// flush writes the ledger into Redis until it is empty.
func (p *Policy) flush() {
	l := &p.ledger
	for {
		l.prune()
		l.mu.Lock()
		if len(l.keys) == 0 {
			l.flushing = false
			l.mu.Unlock()
			return
		}
		names := make([]string, 0, len(l.keys))
		for name := range l.keys {
			names = append(names, name)
		}
		l.mu.Unlock()
		// The limiters pay at once, so that their calls share round
		// trips (the Client pipelines concurrent calls), up to
		// flushWidth at a time.
		var (
			wg          sync.WaitGroup
			unavailable atomic.Bool
			width       = make(chan struct{}, flushWidth)
		)
		for _, name := range names {
			o := l.take(name)
			if o == nil {
				continue // paid by a decision meanwhile
			}
			if unavailable.Load() {
				l.putBack(name, o) // see below
				continue
			}
			width <- struct{}{}
			wg.Go(func() {
				defer func() { <-width }()
				ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				defer cancel()
				if err := p.pay(ctx, name, o); errors.Is(err, core.ErrUnavailable) || busy(err) {
					unavailable.Store(true)
				}
			})
		}
		wg.Wait()
		if unavailable.Load() {
			// Redis fails, or this process is too busy for the calls:
			// try again with the Client's next probe.
			time.Sleep(probeEvery)
		} else {
			time.Sleep(flushEvery)
		}
	}
}

// flushWidth bounds the limiters whose debts the ledger writes at once (a
// few, so that a busy process's decisions do not wait behind them), and
// flushTimeout each one's writes: no request waits for them, and one that
// times out is sent again.
const (
	flushWidth   = 16
	flushTimeout = time.Second
)

// probeEvery is how often the ledger tries Redis while it fails: the
// Client's own probing pace.
const probeEvery = time.Second
