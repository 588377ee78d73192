package ha_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// trips records the script calls (EVALSHA, EVAL) that go through a go-redis
// client, alone or in a pipeline, one trip per Process or pipeline: a hook
// of the client the Client was given, so it sees each round trip as the
// Client made it, before a ClusterClient splits a pipeline by node. The
// tests judge by these counts and orders what the Client sent, which load
// cannot change, where a wall-clock bound could break.
type trips struct {
	mu  sync.Mutex
	all []trip
}

// trip is one round trip of script calls.
type trip struct {
	slots      []int // the hash slots of its calls' keys, each once, in order
	start, end time.Time
	// failed: a call of the trip got no answer from Redis (a network error,
	// a timeout) or a refusal (CLUSTERDOWN, READONLY, ...). A NOSCRIPT reply,
	// which the Client answers with EVAL, is an answer.
	failed bool
	// timedOut: every failure of the trip was its context's deadline or a
	// read timeout: no answer in time, which a loaded machine may cause,
	// rather than an error that Redis, or a connection to it, gave.
	timedOut bool
}

// record adds trips' hook to rdb.
func (tr *trips) record(rdb interface{ AddHook(redis.Hook) }) *trips {
	rdb.AddHook(tr)
	return tr
}

func (tr *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (tr *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		tr.add([]redis.Cmder{cmd}, start)
		return err
	}
}

func (tr *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		if slices.ContainsFunc(cmds, isScript) {
			tr.add(cmds, start)
		}
		return err
	}
}

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval"
}

func (tr *trips) add(cmds []redis.Cmder, start time.Time) {
	t := trip{start: start, end: time.Now(), timedOut: true}
	for _, cmd := range cmds {
		if s, ok := firstKeySlot(cmd); ok && !slices.Contains(t.slots, s) {
			t.slots = append(t.slots, s)
		}
		if err := cmd.Err(); err != nil && !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			t.failed = true
			var ne net.Error
			t.timedOut = t.timedOut && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout())
		}
	}
	t.timedOut = t.timedOut && t.failed
	tr.mu.Lock()
	tr.all = append(tr.all, t)
	tr.mu.Unlock()
}

// firstKeySlot returns the hash slot of a script call's first key
// (EVALSHA sha numkeys key ...); the Client's keys of one call share it.
func firstKeySlot(cmd redis.Cmder) (int, bool) {
	args := cmd.Args()
	if len(args) < 4 {
		return 0, false
	}
	switch k := args[3].(type) {
	case string:
		return slot.Of(k), true
	case *string:
		return slot.Of(*k), true
	}
	return 0, false
}

// snapshot returns the trips so far, by start.
func (tr *trips) snapshot() []trip {
	tr.mu.Lock()
	all := slices.Clone(tr.all)
	tr.mu.Unlock()
	slices.SortFunc(all, func(a, b trip) int { return a.start.Compare(b.start) })
	return all
}

// probesAfter returns, for the trips of slot s (any slot if s < 0) that
// started at or after from, how many failed before the first that did
// not, and when that one came back (zero if none did).
func probesAfter(all []trip, s int, from time.Time) (failed int, back time.Time) {
	for _, t := range all {
		if t.start.Before(from) || s >= 0 && !slices.Contains(t.slots, s) {
			continue
		}
		if !t.failed {
			return failed, t.end
		}
		failed++
	}
	return failed, time.Time{}
}
