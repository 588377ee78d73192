package policy

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/escaped"
	"github.com/redlimit/redlimit/keyfunc"
)

// An operator's view of a policy: a key's state (Peek), a reset (Reset),
// the keys in Redis (Keys), and per-key overrides of the limit.
//
// A key is the request's key as the key functions return it, before
// escaping ("alice", "192.0.2.1"); a request limited under the missing-key
// rule has the key ":ip:" and its client address (":ip:192.0.2.1"), and a
// key longer than 64 bytes, which Redis holds hashed, is named by its hash
// ("~" and 22 characters), as Keys lists them.

// missingIPKey begins the keys of the requests without a key, limited by
// their client address (WithMissingKeyIP).
const missingIPKey = ":ip:"

// limiterOf returns the limiter name of key, or an error for a key no
// request can have.
func (p *Policy) limiterOf(key string) (string, error) {
	switch {
	case key == "":
		return "", fmt.Errorf("policy %s: %w: an empty key", p.name, core.ErrInvalidName)
	case strings.HasPrefix(key, missingIPKey):
		return p.prefix + missingIPKey + keyfunc.Escape(key[len(missingIPKey):]), nil
	case isHashed(key):
		return p.prefix + key, nil
	}
	return p.prefix + keyfunc.Escape(key), nil
}

// isHashed reports whether key is the hashed form of a long key: '~' and
// 22 characters of unpadded base64url.
func isHashed(key string) bool {
	if len(key) != 23 || key[0] != '~' {
		return false
	}
	for _, c := range key[1:] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Peek returns what the next request of key, at the policy's cost, would
// get now, taking nothing: whether it would be served, the permits (or
// slots, or what is left of the period) left, and, when it would be
// refused, the time until it would not be (unknown for a concurrency
// limit: 0). The limit is the key's override if it has one, else the
// policy's own: a rate function, which reads the request, plays no part.
// The override is read from Redis, as Override reads it, so that a process
// that has not read the overrides yet (one just started, such as a
// command's) tells the limit that every process applies within a second.
func (p *Policy) Peek(ctx context.Context, key string) (core.Result, error) {
	name, err := p.limiterOf(key)
	if err != nil {
		return core.Result{}, err
	}
	limit, ok, err := p.stored(ctx, name)
	if err != nil {
		return core.Result{}, fmt.Errorf("policy %s: peek: %w", p.name, err)
	}
	prep := p.base
	if ok {
		r := p.base.rate
		r.Permits = limit
		if ov, err := p.rates.get(p, r); err == nil {
			prep = ov // else not a limit New would take: the key keeps its own, as in its decisions
		}
	}
	if p.kind == kindConcurrency {
		n, err := p.client.Semaphore(name, prep.semOpts...).Available(ctx)
		if err != nil {
			return core.Result{}, fmt.Errorf("policy %s: peek: %w", p.name, err)
		}
		return core.Result{Allowed: n >= p.cost, Remaining: n, Rate: prep.rate}, nil
	}
	r, err := p.client.Limiter(name, prep.limOpts...).Peek(ctx, p.cost)
	if err != nil {
		return core.Result{}, fmt.Errorf("policy %s: peek: %w", p.name, err)
	}
	return r, nil
}

// Reset forgets key's state in Redis: the grants of its window, its
// period's count, or the slots its requests hold. Every process serves the
// key's next request within a second, whatever it holds in memory as
// refused (a denial answers a second at most while Redis answers; a call
// that Redis does not answer gets the denial until its retry time, see
// core.WithDenialCache). A request of a concurrency
// limit still running holds its slot again at its next renewal. It does
// not touch the key's override.
func (p *Policy) Reset(ctx context.Context, key string) error {
	name, err := p.limiterOf(key)
	if err != nil {
		return err
	}
	if p.kind == kindConcurrency {
		_, err = p.client.Semaphore(name).Delete(ctx)
	} else {
		_, err = p.client.Limiter(name, p.base.limOpts...).Delete(ctx) // a quota's keys are its own
	}
	if err != nil {
		return fmt.Errorf("policy %s: reset: %w", p.name, err)
	}
	return nil
}

// Keys returns the keys that have state in Redis under the policy's name,
// each once, read from every master of a Cluster, as Peek and Reset take
// them. Its work grows with the keys in Redis under the name: it is an
// operator's tool, not a request's. Iteration stops at the first error,
// which it yields.
func (p *Policy) Keys(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for name, err := range p.client.Names(ctx, p.prefix) {
			if err != nil {
				yield("", fmt.Errorf("policy %s: keys: %w", p.name, err))
				return
			}
			key, ok := keyOf(name[len(p.prefix):])
			if ok && !yield(key, nil) {
				return
			}
		}
	}
}

// keyOf returns the key of the escaped part of a limiter name, and false
// for what is no request's key (the overrides).
func keyOf(part string) (string, bool) {
	ns := ""
	if strings.HasPrefix(part, missingIPKey) {
		ns, part = missingIPKey, part[len(missingIPKey):]
	} else if strings.HasPrefix(part, ":") {
		return "", false
	}
	key, _, err := escaped.Unescape(part)
	if err != nil {
		return "", false // not a name a policy writes
	}
	return ns + key, true
}

// overridesName is the name of the hash of a policy's overrides, after
// its escaped name: in the namespace no key reaches.
const overridesName = ":overrides"

// versionField is the field of the overrides hash counting its changes:
// no escaped key has a '~' and a single letter.
const versionField = "~v"

// SetOverride sets key's limit to limit, in place of the policy's and of
// its rate function's, over the policy's own interval (or period), until
// DeleteOverride: the slots of a concurrency limit, the permits of a rate
// or a quota. The override is stored in Redis, and every process of the
// policy applies it within a second (it reads the overrides once every
// 500 ms, not per request), keeps it while Redis is down (at its share,
// under WithFailLocal), and shows it in the headers (q). The key keeps
// its history: the grants of the window count against the new limit.
func (p *Policy) SetOverride(ctx context.Context, key string, limit int64) error {
	name, err := p.limiterOf(key)
	switch {
	case err != nil:
		return err
	case limit < 1 || limit > core.MaxPermits || p.kind == kindConcurrency && limit > maxConcurrency:
		return fmt.Errorf("policy %s: override %d: %w: a limit is from 1 to %d", p.name, limit, core.ErrInvalidPermits,
			map[bool]int64{true: maxConcurrency, false: core.MaxPermits}[p.kind == kindConcurrency])
	}
	field := name[len(p.prefix):]
	if err := p.ov.write(ctx, func(pipe redis.Pipeliner) { pipe.HSet(ctx, p.ov.key, field, limit) }); err != nil {
		return fmt.Errorf("policy %s: set override: %w", p.name, err)
	}
	p.ov.apply(field, limit)
	return nil
}

// Override returns key's override, as Redis holds it, and whether it has
// one.
func (p *Policy) Override(ctx context.Context, key string) (limit int64, ok bool, err error) {
	name, err := p.limiterOf(key)
	if err != nil {
		return 0, false, err
	}
	limit, ok, err = p.stored(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("policy %s: override: %w", p.name, err)
	}
	return limit, ok, nil
}

// stored returns the override of the limiter name as Redis holds it, and
// whether it has one.
func (p *Policy) stored(ctx context.Context, name string) (int64, bool, error) {
	v, err := p.client.Redis().HGet(ctx, p.ov.key, name[len(p.prefix):]).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return v, true, nil
}

// DeleteOverride removes key's override: every process applies the
// policy's own limit (or its rate function's) within a second.
func (p *Policy) DeleteOverride(ctx context.Context, key string) error {
	name, err := p.limiterOf(key)
	if err != nil {
		return err
	}
	field := name[len(p.prefix):]
	if err := p.ov.write(ctx, func(pipe redis.Pipeliner) { pipe.HDel(ctx, p.ov.key, field) }); err != nil {
		return fmt.Errorf("policy %s: delete override: %w", p.name, err)
	}
	p.ov.apply(field, 0)
	return nil
}

// override returns the prepared limit of the key's override, when the
// limiter name has one, or nil.
func (p *Policy) override(name string) *prepared {
	m := p.ov.m.Load()
	if m == nil || len(*m) == 0 {
		return nil
	}
	limit, ok := (*m)[name[len(p.prefix):]]
	if !ok {
		return nil
	}
	r := p.base.rate
	r.Permits = limit
	prep, err := p.rates.get(p, r)
	if err != nil {
		return nil // not a limit New would take: the key keeps its own
	}
	return prep
}

// overrides are the overrides of a policy name on one Client: the hash in
// Redis, and the limits by escaped key that the Client's processes apply.
type overrides struct {
	key     string                           // the hash
	m       atomic.Pointer[map[string]int64] // what is applied
	version int64                            // the hash's version read last (watch)
	rdb     redis.UniversalClient
}

func newOverrides(c *core.Client, name string) *overrides {
	return &overrides{key: c.Limiter(keyfunc.Escape(name) + ":" + overridesName).Name(), rdb: c.Redis()}
}

// write changes the hash with change and counts the change, in one
// transaction.
func (o *overrides) write(ctx context.Context, change func(redis.Pipeliner)) error {
	_, err := o.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		change(pipe)
		pipe.HIncrBy(ctx, o.key, versionField, 1)
		return nil
	})
	return err
}

// apply sets field's limit in what this process applies (0: none), at
// once, for the process that made the change.
func (o *overrides) apply(field string, limit int64) {
	for {
		old := o.m.Load()
		m := map[string]int64{}
		if old != nil {
			m = maps.Clone(*old)
		}
		if limit == 0 {
			delete(m, field)
		} else {
			m[field] = limit
		}
		if o.m.CompareAndSwap(old, &m) {
			return
		}
	}
}

// watchEvery is how often a Client's processes read the overrides'
// versions.
const watchEvery = 500 * time.Millisecond

// watch keeps the overrides of a Client's policy names up to date: every
// watchEvery it reads the version of each hash, and reads a hash again
// when it changed; it stops when the Client is gone, or rdb is closed.
// While Redis cannot answer, the overrides read last stay.
func watch(rdb redis.UniversalClient, cn *clientNames) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-cn.stop:
			return
		case <-t.C:
		}
		registry.Lock()
		all := make([]*overrides, 0, len(cn.overrides))
		for _, o := range cn.overrides {
			all = append(all, o)
		}
		registry.Unlock()
		if errors.Is(refresh(rdb, all), redis.ErrClosed) {
			return
		}
	}
}

// refresh reads the versions of the overrides in one round trip, and the
// hashes whose version changed.
func refresh(rdb redis.UniversalClient, all []*overrides) error {
	ctx, cancel := context.WithTimeout(context.Background(), watchEvery)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(all))
	_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, o := range all {
			cmds[i] = pipe.HGet(ctx, o.key, versionField)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, o := range all {
		v, err := cmds[i].Int64()
		if errors.Is(err, redis.Nil) {
			v, err = 0, nil // never written, or deleted
		}
		if err != nil || v == o.version {
			continue
		}
		if err := o.read(ctx, rdb); err != nil {
			return err
		}
		o.version = v
	}
	return nil
}

// read reads the hash into what this process applies.
func (o *overrides) read(ctx context.Context, rdb redis.UniversalClient) error {
	h, err := rdb.HGetAll(ctx, o.key).Result()
	if err != nil {
		return err
	}
	m := make(map[string]int64, len(h))
	for field, v := range h {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && field != versionField && n > 0 {
			m[field] = n
		}
	}
	o.m.Store(&m)
	return nil
}
