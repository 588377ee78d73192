package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/lru"
)

// NewQuota returns the Policy called name that grants each key q.Limit
// permits per calendar period of q (a Day, an ISO Week from Monday, a
// Month) in q.Location's calendar (nil: UTC), on client c: a Day quota of
// 1 000 grants 1 000 permits from one midnight to the next, at any pace,
// and 1 000 again from that midnight, by Redis's clock. Each key is one
// counter in Redis (core.WithQuota), whatever its limit, which expires
// after its period.
//
// A request over the quota is answered 429, and its Retry-After, t and
// X-RateLimit-Reset are the time until the next period begins, rounded up
// to whole seconds; an allowed request's t and X-RateLimit-Reset are the
// time until the period ends. RateLimit-Policy's w is the length of the
// current period in seconds: 86400 for most Days, 82800 or 90000 for the
// Days its time zone's clocks change. Names, keys, costs, stacking, dry
// run, the observer, refunds, Settle (a request that used more than it
// reserved leaves a debt that refuses the key's requests until the period
// ends), failure policies and wait mode (a request waits only when the
// boundary comes within its maximum wait and deadline) mean what they mean
// for a rate. An invalid quota is an error wrapping core.ErrInvalidRate;
// WithRateFunc and WithLease do not apply, and give an error wrapping
// core.ErrInvalidOption.
//
// While Redis cannot decide, each process grants each key in memory up to
// its share of what the key's period has left (WithFailLocal(instances)):
// ceil(left/instances), left being what Redis's last decision on the key
// in this process said, until the end of that period; and for a key it has
// no decision of, or whose period has ended since, ceil(q.Limit/instances)
// until the end of the period that holds now. What it grants is counted in
// the period's counter once Redis answers. To know what Redis left, the
// process keeps the last decision of at most 100 000 keys per policy, the
// least recently used going first: about 120 bytes each, 12 MB at most,
// whether Redis fails or not.
func NewQuota(c *core.Client, name string, q core.Quota, opts ...Option) (*Policy, error) {
	if err := q.Validate(); err != nil {
		u := use{kind: kindQuota, rate: core.Rate{Permits: q.Limit}, quota: quotaOf(kindQuota, q)}
		return nil, fmt.Errorf("policy %q: %v: %w", name, u, err)
	}
	return newPolicy(c, name, kindQuota, core.Rate{Permits: q.Limit}, q, opts)
}

// MustNewQuota is like NewQuota but panics with its error.
func MustNewQuota(c *core.Client, name string, q core.Quota, opts ...Option) *Policy {
	p, err := NewQuota(c, name, q, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// quotaClaim is a quota's claim: the grant asked.Grant on limiter l. The
// call that asked for it returned, besides, the quota of the current
// period and the time to its end (core's TryAcquire), which a local
// decision needs.
type quotaClaim struct {
	l     *core.Limiter
	asked core.Result
}

// local takes the request's cost from the process's share of what the
// key's period has left (see quotaShares); a grant is charged to the core,
// which counts it in the period's counter once Redis answers.
func (c quotaClaim) local(d *Decision) core.Result {
	p := d.p
	r := p.fallback.quotas.take(d.name, p.quota.Limit, p.shares, d.cost, c.asked, time.Now())
	if r.Allowed {
		r.Grant = c.asked.Grant
		c.l.Charge(c.asked.Grant)
	}
	return r
}

func (c quotaClaim) undo(ctx context.Context) { _, _ = c.l.Refund(ctx, c.asked.Grant) }

// quotaShares are what a quota policy's local fallback may grant, per
// key, in this process.
//
// A calendar quota cannot be cut into a local window as a rate is: its
// permits come back all at once at the boundary, and what a key has left
// of its period is known only to Redis. So the process remembers, for each
// key Redis decided (in the fallback's bounded memory, the least recently
// used keys going first), what the last decision left of the period and
// when that period ends, and while Redis cannot decide, grants the key up
// to ceil(left/instances) until that end. A key it has no decision of, or
// whose period has ended, gets ceil(limit/instances) until the end of the
// period that holds now, as the failed call computed it on the core's
// estimate of Redis's clock. The instances together thus grant about what
// the period had left (more only when their last decisions are not the
// latest), and a local refusal's retry time is the period's end, never
// early. A request that costs more than a share of the whole limit is
// granted alone from such a share, as the rate's fallback grants one in an
// empty window, so that the retry time of its refusal comes true.
type quotaShares struct {
	keys *lru.Map[quotaShare]
}

type quotaShare struct {
	end   int64 // Unix ns, by the local clock: the end of the period counted
	left  int64 // the permits this process may still grant in it
	whole bool  // a share of the whole limit, from which nothing was granted
}

func newQuotaShares(maxKeys int) *quotaShares {
	return &quotaShares{keys: lru.New[quotaShare](maxKeys)}
}

// note records Redis's decision r on the key name, received at now, for
// a policy that instances share.
func (qs *quotaShares) note(name string, r core.Result, instances int64, now time.Time) {
	st, _, s := qs.keys.Lock(name, true)
	*st = quotaShare{end: now.Add(r.ResetAfter).UnixNano(), left: ceilDiv(max(r.Remaining, 0), instances),
		whole: r.Remaining >= r.Rate.Permits}
	s.Unlock()
}

// take decides permits on the key name at now, in memory, at the share of
// a quota of limit that instances share; asked is the result of the call
// Redis did not decide.
func (qs *quotaShares) take(name string, limit, instances, permits int64, asked core.Result, now time.Time) core.Result {
	st, _, s := qs.keys.Lock(name, true)
	defer s.Unlock()
	t := now.UnixNano()
	if t >= st.end {
		// At least a second: a period whose end is not known (which the
		// core always gives) is not begun again by every request.
		end := now.Add(max(asked.ResetAfter, time.Second)).UnixNano()
		*st = quotaShare{end: end, left: ceilDiv(limit, instances), whole: true}
	}
	r := core.Result{Rate: asked.Rate, ResetAfter: time.Duration(st.end - t)}
	if permits <= st.left || st.whole {
		st.left, st.whole = max(st.left-permits, 0), false
		r.Allowed, r.Remaining = true, st.left
		return r
	}
	r.Remaining, r.RetryAfter = st.left, r.ResetAfter
	return r
}

// ceilDiv returns n/d rounded up, for n >= 0 and d > 0.
func ceilDiv(n, d int64) int64 { return (n + d - 1) / d }
