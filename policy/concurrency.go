package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/reqlimits"
	"github.com/redlimit/redlimit/observe"
)

// maxConcurrency bounds a concurrency limit: a slot is a permit of a
// core.Semaphore, whose acquires take at most 10 000.
const maxConcurrency = 10_000

// NewConcurrency returns the Policy called name that limits the requests
// of each key in flight at once to limit, on client c: a request takes a
// slot (or its cost's worth, WithCost) before its handler runs, and gives
// it back when the handler returns or panics; a handler that hands its
// connection over (a WebSocket) holds its slot until the connection
// closes. A slot is a permit of a core.Semaphore, held by a lease (30 s,
// WithLease) that the request renews while it runs, so that a process that
// dies holds its slots one lease at most, by Redis's clock; the semaphore
// keeps the layout of Redisson's RPermitExpirableSemaphore. A request over
// the limit is answered 429 at once, or waits for a slot in wait mode
// (WithWait), woken when one is given back.
//
// Names, keys, stacking, dry run, the observer, failure policies and wait
// mode mean what they mean for a rate. While Redis fails, each process
// limits each key in memory at its share of limit (WithFailLocal, at least
// one slot), counting the slots it holds; the slots it granted meanwhile
// are registered in Redis when it answers again, and, for a while after
// an outage ends (2 s), a slot is granted only if it fits both Redis's
// count and this process's share, so that the holders of other processes
// can register theirs. Headers name the limit with
// qu="concurrent-requests" and carry no time: when a slot frees is not
// known. WithRateFunc and WithRefund do not apply: New returns an error
// wrapping core.ErrInvalidOption for them; limit is from 1 to 10 000.
func NewConcurrency(c *core.Client, name string, limit int64, opts ...Option) (*Policy, error) {
	if limit < 1 || limit > maxConcurrency {
		return nil, fmt.Errorf("policy %q: %w: a concurrency limit of %d, not in [1, %d]", name, core.ErrInvalidPermits, limit, maxConcurrency)
	}
	return newPolicy(c, name, kindConcurrency, core.Rate{Permits: limit}, core.Quota{}, opts)
}

// MustNewConcurrency is like NewConcurrency but panics with its error.
func MustNewConcurrency(c *core.Client, name string, limit int64, opts ...Option) *Policy {
	p, err := NewConcurrency(c, name, limit, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// decideSlot takes a slot of d's semaphore for the request, waiting for
// one in wait mode: the call made within ctx (see callContext), the wait
// within the request's own, reqCtx.
func (p *Policy) decideSlot(ctx, reqCtx context.Context, d *Decision) {
	s := p.client.Semaphore(d.name, d.prep.semOpts...)
	lease, r, err := s.TryAcquire(ctx, d.cost, p.lease)
	waited := false
	if err == nil && !r.Allowed && p.waits != nil {
		lease, r, waited, err = p.waits.waitSlot(reqCtx, p, s, d.name, d.cost, r)
	}
	if err != nil {
		if errors.Is(err, core.ErrUnavailable) {
			p.held.watch(p, err)
		}
		p.withoutRedis(d, slotClaim{p, s, lease}, err)
		return
	}
	// A lease's end is no retry time: the holders renew their leases.
	r.Rate, r.RetryAfter = d.prep.rate, 0
	if r.Allowed {
		// Just after an outage the slot must fit this process's share too.
		limit := int64(0)
		if p.held.regaining() {
			limit = d.prep.share.Permits
		}
		if d.slot = p.hold(s, d.name, lease, d.cost, limit); d.slot == nil {
			p.giveBack(context.WithoutCancel(d.limits), s, lease)
			d.Result = core.Result{Rate: d.prep.share}
			if p.dryRun {
				d.Outcome = observe.DryRunDenied
			} else {
				d.refuse(observe.FallbackDenied, http.StatusTooManyRequests, d.prep.headers.deny)
			}
			return
		}
	}
	d.Result = r
	d.decided(waited)
}

// slotClaim is a concurrency limit's claim: lease on semaphore s.
type slotClaim struct {
	p     *Policy
	s     *core.Semaphore
	lease core.Lease
}

// local holds the slot in memory, if this process holds fewer than its
// share of the key's slots; its lease is registered in Redis when Redis
// answers (a renewal holds what Redis does not).
func (c slotClaim) local(d *Decision) core.Result {
	share := d.prep.share.Permits
	r := core.Result{Rate: d.prep.share}
	if d.slot = c.p.hold(c.s, d.name, c.lease, d.cost, share); d.slot != nil {
		r.Allowed = true
	}
	r.Remaining = max(share-c.p.held.of(d.name), 0)
	return r
}

func (c slotClaim) undo(ctx context.Context) { c.p.giveBack(ctx, c.s, c.lease) }

// holders are the slots a concurrency policy's requests hold in this
// process, and those it gives back still.
type holders struct {
	mu     sync.Mutex
	perKey map[string]int64 // slots held per limiter name
	slots  map[*slot]struct{}
	// until is when (unix nanos) the time after an outage ends, in which
	// a slot must fit this process's share too (see regain).
	until   atomic.Int64
	outages sync.Map // *core.Outage -> true: those watched
}

func newHolders() *holders {
	return &holders{perKey: map[string]int64{}, slots: map[*slot]struct{}{}}
}

// A slot is what one request holds: permits of semaphore s under lease,
// counted as cost against the limiter name, renewed while held.
type slot struct {
	p     *Policy
	s     *core.Semaphore
	name  string
	lease core.Lease
	cost  int64
	timer *time.Timer

	mu      sync.Mutex // held across each call on the lease
	renewed time.Time  // the last Renew Redis answered, or the take
	ended   bool       // the request ended: the lease is given back
	gone    bool       // nothing more to do: given back, or its lease over
}

// regainFor is how long, after an outage, a slot must fit this process's
// share too: the other processes' probes (one a second) find Redis again
// and their holders register what they hold meanwhile.
const regainFor = 2 * time.Second

// hold records a slot of cost on the key name, held under lease, and
// starts its renewals; with limit above 0, only if this process holds at
// most limit slots of the key with it, and nil otherwise.
func (p *Policy) hold(s *core.Semaphore, name string, lease core.Lease, cost, limit int64) *slot {
	h := p.held
	sl := &slot{p: p, s: s, name: name, lease: lease, cost: cost, renewed: time.Now()}
	h.mu.Lock()
	n := h.perKey[name]
	if limit > 0 && n+cost > limit {
		h.mu.Unlock()
		return nil
	}
	h.perKey[name] = n + cost
	sl.mu.Lock() // the timer's tick reads sl.timer under sl.mu
	sl.timer = time.AfterFunc(p.lease/3, sl.tick)
	sl.mu.Unlock()
	h.slots[sl] = struct{}{}
	h.mu.Unlock()
	if p.observer != nil {
		p.observer.Held(p.name, cost)
	}
	return sl
}

// of returns the slots this process holds on the key name.
func (h *holders) of(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.perKey[name]
}

// giveBack releases lease, which no request holds, now or, failing that,
// later (see slot.tick).
func (p *Policy) giveBack(ctx context.Context, s *core.Semaphore, lease core.Lease) {
	if lease == (core.Lease{}) {
		return
	}
	sl := &slot{p: p, s: s, lease: lease, renewed: time.Now(), ended: true}
	sl.mu.Lock()
	sl.timer = time.AfterFunc(p.lease/10, sl.tick)
	sl.mu.Unlock()
	p.held.mu.Lock()
	p.held.slots[sl] = struct{}{}
	p.held.mu.Unlock()
	sl.end(ctx)
}

// release gives the slot back: the request that held it ended.
func (sl *slot) release(ctx context.Context) {
	h := sl.p.held
	sl.mu.Lock()
	if sl.ended {
		sl.mu.Unlock()
		return
	}
	sl.ended = true
	sl.mu.Unlock()
	h.mu.Lock()
	if h.perKey[sl.name] -= sl.cost; h.perKey[sl.name] <= 0 {
		delete(h.perKey, sl.name)
	}
	h.mu.Unlock()
	if sl.p.observer != nil {
		sl.p.observer.Held(sl.p.name, -sl.cost)
	}
	sl.end(ctx)
}

// end releases the lease of a slot whose request ended, or, when Redis
// does not answer, leaves it to tick; so it does at once for a request that
// already waited its time on Redis (a round trip of its limits got no
// answer in time), which does not wait a second timeout for the release.
func (sl *slot) end(ctx context.Context) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.timer.Stop()
	if sl.lease == (core.Lease{}) {
		sl.done() // nothing in Redis to give back
		return
	}
	if l, ok := reqlimits.From(ctx); ok && l.Lost {
		sl.timer.Reset(0)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sl.p.timeout)
	defer cancel()
	if sl.call(ctx) == nil {
		sl.done()
		return
	}
	sl.timer.Reset(sl.p.lease / 10)
}

// tick renews the lease of a slot held, or gives back that of a slot whose
// request ended, and sets the next: a third of the lease later, or a tenth
// when Redis did not answer. A lease given back in vain until it is over
// needs no more.
func (sl *slot) tick() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	p := sl.p
	if sl.gone || sl.lease == (core.Lease{}) {
		return
	}
	if sl.ended && time.Since(sl.renewed) > p.lease {
		sl.done()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	err := sl.call(ctx)
	switch {
	case err == nil && sl.ended:
		sl.done()
	case err == nil:
		sl.timer.Reset(p.lease / 3)
	default:
		if errors.Is(err, core.ErrUnavailable) {
			p.held.watch(p, err)
		}
		sl.timer.Reset(p.lease / 10)
	}
}

// call renews the lease, or releases it once the request ended, under
// sl.mu.
func (sl *slot) call(ctx context.Context) error {
	if sl.ended {
		_, err := sl.s.Release(ctx, sl.lease)
		return err
	}
	sent := time.Now()
	_, err := sl.s.Renew(ctx, sl.lease, sl.p.lease)
	if err == nil {
		sl.renewed = sent
	}
	return err
}

// done forgets the slot, under sl.mu.
func (sl *slot) done() {
	sl.gone = true
	h := sl.p.held
	h.mu.Lock()
	delete(h.slots, sl)
	h.mu.Unlock()
}

// watch notes an outage (in err) that a call of the policy met: when it
// ends, the holders regain their slots.
func (h *holders) watch(p *Policy, err error) {
	var o *core.Outage
	if !errors.As(err, &o) {
		return
	}
	if _, seen := h.outages.LoadOrStore(o, true); seen {
		return
	}
	go func() {
		<-o.Done()
		h.regain()
		h.outages.Delete(o)
	}()
}

// regain registers in Redis, now and once more when regainFor has passed,
// every slot held (a renewal holds again what Redis lost, or never had:
// the fallback's), and gives back those whose requests ended; meanwhile a
// slot must fit this process's share too.
func (h *holders) regain() {
	h.until.Store(time.Now().Add(regainFor).UnixNano())
	h.tickAll()
	time.AfterFunc(regainFor, h.tickAll)
}

// regaining reports whether an outage ended less than regainFor ago.
func (h *holders) regaining() bool { return time.Now().UnixNano() < h.until.Load() }

// tickAll ticks every slot at once.
func (h *holders) tickAll() {
	h.mu.Lock()
	all := make([]*slot, 0, len(h.slots))
	for sl := range h.slots {
		all = append(all, sl)
	}
	h.mu.Unlock()
	for _, sl := range all {
		go sl.tick()
	}
}
