package policy

import (
	"fmt"
	"sync"

	"github.com/redlimit/redlimit/core"
)

// prepared is what a policy needs for one rate, or for its concurrency
// limit or quota, made once: the limiter or semaphore options, the headers
// and bodies, and the local fallback's share.
type prepared struct {
	rate    core.Rate // a concurrency limit's or a quota's in Permits
	share   core.Rate // that of one instance, for the local fallback
	limOpts []core.LimiterOption
	semOpts []core.SemaphoreOption
	headers header
}

// prepare makes the prepared rate r, which is valid for the policy's kind.
func (p *Policy) prepare(r core.Rate) *prepared {
	share := r
	share.Permits = max((r.Permits+p.shares-1)/p.shares, 1)
	prep := &prepared{rate: r, share: share, headers: newHeader(p.name, p.kind, r, p.quota.Period, p.style)}
	switch p.kind {
	case kindConcurrency:
		prep.semOpts = []core.SemaphoreOption{core.WithPermits(r.Permits), core.WithCallTimeout(p.timeout)}
	case kindQuota:
		q := p.quota
		q.Limit = r.Permits // an override's
		prep.limOpts = []core.LimiterOption{core.WithQuota(q), core.WithCallTimeout(p.timeout)}
	default:
		prep.limOpts = []core.LimiterOption{core.WithRate(r), core.WithCallTimeout(p.timeout)}
	}
	return prep
}

// maxRates bounds the rates a policy keeps prepared for its rate function
// and its overrides.
const maxRates = 256

// rates are the prepared rates a rate function or an override chose.
type rates struct {
	mu sync.RWMutex
	m  map[core.Rate]*prepared
}

// get returns r prepared, validating it the first time.
func (rs *rates) get(p *Policy, r core.Rate) (*prepared, error) {
	rs.mu.RLock()
	prep, ok := rs.m[r]
	rs.mu.RUnlock()
	if ok {
		return prep, nil
	}
	if p.kind == kindRate {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("WithRateFunc: %w", err)
		}
	}
	if base := p.base.rate; r.Interval != base.Interval || r.Type != base.Type {
		// One limiter, one window: another window would change the
		// limiter's stored rate, and its history with it.
		return nil, fmt.Errorf("WithRateFunc: %w: rate %v: a rate function may change the permits only, "+
			"not the interval or type of the policy's rate %v; give another window a policy of its own", core.ErrInvalidRate, r, base)
	}
	prep = p.prepare(r)
	rs.mu.Lock()
	if rs.m == nil {
		rs.m = make(map[core.Rate]*prepared)
	}
	if len(rs.m) < maxRates {
		rs.m[r] = prep
	}
	rs.mu.Unlock()
	return prep, nil
}
