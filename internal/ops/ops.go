// Package ops holds what package admin and the redlimit command share: the
// reads of a policy's keys and of a key's state, and their JSON, so that
// both answer in the same terms.
package ops

import (
	"context"
	"time"

	"github.com/redlimit/redlimit/policy"
)

// State is what a key's next request would get now, and its override.
type State struct {
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	Limit        int64  `json:"limit"`                 // the key's override, or the policy's limit
	IntervalMS   int64  `json:"interval_ms,omitempty"` // a rate's; none for a concurrency limit
	RetryAfterMS int64  `json:"retry_after_ms"`        // 0 when allowed, or unknown
	ResetAfterMS int64  `json:"reset_after_ms"`
	Override     *int64 `json:"override,omitempty"`
}

// Peek returns the state of key in p, called name, taking nothing.
func Peek(ctx context.Context, p *policy.Policy, name, key string) (State, error) {
	r, err := p.Peek(ctx, key)
	if err != nil {
		return State{}, err
	}
	s := State{
		Policy: name, Key: key, Allowed: r.Allowed, Remaining: r.Remaining,
		Limit: r.Rate.Permits, IntervalMS: r.Rate.Interval.Milliseconds(),
		RetryAfterMS: ms(r.RetryAfter), ResetAfterMS: ms(r.ResetAfter),
	}
	limit, ok, err := p.Override(ctx, key)
	if err != nil {
		return State{}, err
	}
	if ok {
		s.Override = &limit
	}
	return s, nil
}

// ms returns d in milliseconds, rounded up: a time to wait is never told
// early.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Override is a key's override of its policy's limit; a nil Limit says
// that the key has none.
type Override struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Limit  *int64 `json:"limit"`
}

// Keys are keys with state in Redis, and whether there were more.
type Keys struct {
	Policy    string   `json:"policy"`
	Keys      []string `json:"keys"`
	Truncated bool     `json:"truncated"`
}

// ListKeys returns the first limit keys of p, called name, that Redis
// lists, and whether it lists more; limit 0 lists them all.
func ListKeys(ctx context.Context, p *policy.Policy, name string, limit int) (Keys, error) {
	out := Keys{Policy: name, Keys: []string{}}
	for k, err := range p.Keys(ctx) {
		if err != nil {
			return Keys{}, err
		}
		if limit > 0 && len(out.Keys) == limit {
			out.Truncated = true
			break
		}
		out.Keys = append(out.Keys, k)
	}
	return out, nil
}
