package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
	vs := []variant{
		direct(scriptReturnOne, floorScript),
		direct(scriptStraight, straightline),
		through(redlimitLib),
		through(redisRateLib),
		through(ululeLib),
		through(floorLib),
	}
	return h.inTurns(len(vs), func(i int) (row, error) { return h.point(ctx, vs[i].id, true, vs[i].s) })
}
