package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// Scenario s: Redis's own time per script call, read from INFO
// commandstats, for scripts called directly and for the libraries' own.
const (
	scriptKeys       = 4096 // distinct limiters, all far below their limits
	scriptPipeline   = 32   // EVALSHA per pipeline, for the scripts called directly
	scriptPipeliners = 4    // goroutines sending those pipelines
	scriptCallers    = 64   // goroutines calling a library

	scriptWarmup = 100 * time.Millisecond // at most, and the same for each variant
	scriptRun    = 300 * time.Millisecond

	scriptReturnOne = "return 1"
	scriptStraight  = "straight-line (Redisson layout)"
	casePipelines   = "pipelines of 32 EVALSHA"
	caseLibrary     = "the library, 64 goroutines"

	// The calls that follow a decision, on grants of reservedPermits
	// permits taken just before: a settle below and above the reservation,
	// and a refund.
	reservedPermits = 2
	settledBelow    = 1
	settledAbove    = 3
	libSettleBelow  = "redlimit's settle, 2 → 1 permits (below the reservation)"
	libSettleAbove  = "redlimit's settle, 2 → 3 permits (above the reservation)"
	libRefund       = "redlimit's refund (2 permits)"
	// grantMargin is how many times the measured time (warm-up included)
	// the grants are taken for: a settle or refund is one script call of
	// its own, never faster through the library than the acquires, which
	// share script calls.
	grantMargin = 3
)

//go:embed lua/straightline.lua
var straightlineSrc string

var (
	straightline = redis.NewScript(straightlineSrc)
	scriptNames  = names("s:", scriptKeys)
	layouts      = layoutKeys(scriptKeys)
)

// layoutKeys returns the keys of n limiters on Redisson's layout: config
// hash, counter and log.
func layoutKeys(n int) [][]string {
	ks := make([][]string, n)
	for i := range ks {
		name := "{s:" + strconv.Itoa(i) + "}"
		ks[i] = []string{name, name + ":value", name + ":permits"}
	}
	return ks
}

// logMember returns a log member as Redisson writes it: 0x10, 16 random
// bytes and the permit count (1), a little-endian uint32.
func logMember() string {
	var b [21]byte
	b[0] = 0x10
	binary.LittleEndian.PutUint64(b[1:], rand.Uint64())
	binary.LittleEndian.PutUint64(b[9:], rand.Uint64())
	binary.LittleEndian.PutUint32(b[17:], 1)
	return string(b[:])
}

// createLayouts writes the config hash of every limiter of layouts (a rate
// of allowedLimit per minute) and its full counter.
func createLayouts(ctx context.Context, rdb *redis.Client) error {
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range layouts {
			p.HSet(ctx, k[0], "rate", allowedLimit, "interval", window.Milliseconds(), "type", 0,
				"keepAliveTime", 2*window.Milliseconds())
			p.Set(ctx, k[1], allowedLimit, 2*window)
		}
		return nil
	})
	return err
}

// pipelined calls script directly, as the project measures a script's
// cost: pipelines of scriptPipeline EVALSHA over the limiters of layouts,
// each with a new log member. Its "decisions" are pipelines.
func pipelined(script *redis.Script) setup {
	return func(ctx context.Context, rdb *redis.Client, callers int) (op, error) {
		if err := script.Load(ctx, rdb).Err(); err != nil {
			return nil, err
		}
		if err := createLayouts(ctx, rdb); err != nil {
			return nil, err
		}
		return func(ctx context.Context, w, i int) (bool, error) {
			p := rdb.Pipeline()
			for j := range scriptPipeline {
				k := (w*scriptKeys/callers + i*scriptPipeline + j) % scriptKeys
				script.EvalSha(ctx, p, layouts[k], logMember())
			}
			_, err := p.Exec(ctx)
			return err == nil, err
		}, nil
	}
}

// throughLibrary calls lib's own script through lib, from its callers over
// scriptKeys keys, each decided once before.
func throughLibrary(lib library) setup {
	return func(ctx context.Context, rdb *redis.Client, callers int) (op, error) {
		c, err := lib.new(rdb, allowedLimit)
		if err != nil {
			return nil, err
		}
		if err := touch(ctx, c, scriptNames); err != nil {
			return nil, err
		}
		return func(ctx context.Context, w, i int) (bool, error) {
			return c.Decide(ctx, scriptNames[(w*scriptKeys/callers+i)%scriptKeys])
		}, nil
	}
}

// errGrantsUsedUp reports a worker that settled or refunded every grant
// taken for it before the run ended.
var errGrantsUsedUp = errors.New("grants taken before the run used up")

// heldGrant is a grant and the limiter that took it.
type heldGrant struct {
	l *core.Limiter
	g core.Grant
}

// afterGrant measures a call that follows a decision, act, through redlimit
// as redlimitLib makes its decisions (coalescing on, a Limiter per key with
// the rate in code), from callers goroutines over scriptKeys keys, each
// decided once before. Before the run each goroutine takes grants of
// reservedPermits permits, round robin over the keys, for grantMargin
// times the warm-up and measured time; each call then acts on the next grant
// of its goroutine, so that only the acts count in commandstats. An act
// that does not report true (the grant was not found) is an error, and so
// is a goroutine left without grants.
func (h *harness) afterGrant(act func(ctx context.Context, l *core.Limiter, g core.Grant) (bool, error)) setup {
	return func(ctx context.Context, rdb *redis.Client, callers int) (op, error) {
		client, err := core.New(rdb)
		if err != nil {
			return nil, err
		}
		opts := []core.LimiterOption{core.WithRate(core.PerMinute(allowedLimit))}
		limiter := func(k int) *core.Limiter { return client.Limiter(scriptNames[k%scriptKeys], opts...) }
		if err := forEach(scriptKeys, 32, func(k int) error {
			_, err := limiter(k).TryAcquire(ctx, 1)
			return err
		}); err != nil {
			return nil, err
		}
		grants := make([][]heldGrant, callers)
		errs := make([]error, callers)
		until := time.Now().Add(grantMargin * (h.warmup + h.duration))
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for j := 0; time.Now().Before(until); j++ {
					l := limiter(w*scriptKeys/callers + j)
					r, err := l.TryAcquire(ctx, reservedPermits)
					if err == nil && !r.Allowed {
						err = errors.New("a grant was denied")
					}
					if err != nil {
						errs[w] = err
						return
					}
					grants[w] = append(grants[w], heldGrant{l, r.Grant})
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		next := make([]int, callers) // each worker's next grant
		return func(ctx context.Context, w, _ int) (bool, error) {
			if next[w] == len(grants[w]) {
				return false, errGrantsUsedUp
			}
			g := grants[w][next[w]]
			next[w]++
			ok, err := act(ctx, g.l, g.g)
			if err == nil && !ok {
				err = errors.New("grant not found")
			}
			return ok, err
		}, nil
	}
}

// runS is scenario s: each script variant in turns.
func (h *harness) runS(ctx context.Context) ([]row, error) {
	type variant struct {
		id row
		s  setup
	}
	direct := func(name string, script *redis.Script) variant {
		return variant{row{Scenario: "s", Case: casePipelines, Library: name, Callers: scriptPipeliners}, pipelined(script)}
	}
	through := func(lib library) variant {
		return variant{row{Scenario: "s", Case: caseLibrary, Library: lib.name, Callers: scriptCallers}, throughLibrary(lib)}
	}
	after := func(name string, act func(ctx context.Context, l *core.Limiter, g core.Grant) (bool, error)) variant {
		return variant{row{Scenario: "s", Case: caseLibrary, Library: name, Callers: scriptCallers}, h.afterGrant(act)}
	}
	settle := func(permits int64) func(context.Context, *core.Limiter, core.Grant) (bool, error) {
		return func(ctx context.Context, l *core.Limiter, g core.Grant) (bool, error) {
			return l.Settle(ctx, g, permits)
		}
	}
	refund := func(ctx context.Context, l *core.Limiter, g core.Grant) (bool, error) { return l.Refund(ctx, g) }
	vs := []variant{
		direct(scriptReturnOne, floorScript),
		direct(scriptStraight, straightline),
		through(redlimitLib),
		after(libSettleBelow, settle(settledBelow)),
		after(libSettleAbove, settle(settledAbove)),
		after(libRefund, refund),
		through(redisRateLib),
		through(ululeLib),
		through(floorLib),
	}
	return h.inTurns(len(vs), func(i int) (row, error) { return h.point(ctx, vs[i].id, true, vs[i].s) })
}
