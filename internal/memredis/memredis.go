// Package memredis is a go-redis client that never touches the network: it
// answers the limiter's acquire script from memory, always allowing. It
// exists to measure what the middleware costs apart from Redis ("a core
// that answers from memory"): everything the core does in Go runs, only
// the round trip is skipped.
package memredis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Remaining is the number of permits every decision reports as left.
const Remaining = 999_999

// New returns a client whose commands are answered by a hook: acquire
// scripts get an "allowed" reply, everything else an error.
func New() redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", MaxRetries: -1, ContextTimeoutEnabled: true})
	rdb.AddHook(hook{})
	return rdb
}

var errUnsupported = errors.New("memredis: only the limiter's acquire script is answered")

type hook struct{}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (hook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { return answer(cmd) }
}

func (hook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		var first error
		for _, cmd := range cmds {
			if err := answer(cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// replies caches one reply per interval argument (keyed by its pointer,
// which is stable per rate): answering allocates nothing, so a benchmark
// sees only the allocations of the code under test.
var replies sync.Map

// answer sets the reply of an acquire call (EVALSHA or EVAL, five keys, a
// code-defined rate, then permits and a member per acquire): {now}, the
// time of the first call with that interval, then Remaining (granted) per
// acquire.
func answer(cmd redis.Cmder) error {
	c, ok := cmd.(*redis.IntSliceCmd)
	args := cmd.Args()
	if !ok || len(args) < 14 || len(args)%2 != 0 || (args[0] != "evalsha" && args[0] != "eval") {
		cmd.SetErr(errUnsupported)
		return errUnsupported
	}
	iv, ok := args[9].(*string)
	if !ok || *iv == "" { // not a code-defined rate
		cmd.SetErr(errUnsupported)
		return errUnsupported
	}
	acquires := (len(args) - 12) / 2
	key := [2]any{iv, acquires}
	reply, ok := replies.Load(key)
	if !ok {
		v := []int64{time.Now().UnixMilli()}
		for range acquires {
			v = append(v, Remaining)
		}
		reply, _ = replies.LoadOrStore(key, v)
	}
	c.SetVal(reply.([]int64))
	return nil
}
