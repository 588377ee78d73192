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

// replies caches one reply per number of acquires: answering allocates
// nothing, so a benchmark sees only the allocations of the code under test.
var replies sync.Map

// epoch is the "now" of every reply.
var epoch = time.Now().UnixMilli()

// answer sets the reply of an acquire call (EVALSHA or EVAL with three
// keys per limiter and, per limiter, a code-defined rate, the number of
// acquires, then permits and a member per acquire): {now}, then Remaining
// (granted) per acquire.
func answer(cmd redis.Cmder) error {
	c, ok := cmd.(*redis.IntSliceCmd)
	args := cmd.Args()
	if !ok || len(args) < 3 || (args[0] != "evalsha" && args[0] != "eval") {
		return unsupported(cmd)
	}
	keys, ok := args[2].(int)
	if !ok || keys < 3 || keys%3 != 0 || len(args) < 3+keys {
		return unsupported(cmd)
	}
	acquires := 0
	for a := 3 + keys; a < len(args); {
		interval, ok := args[a+1].(*string)
		if !ok || *interval == "" || a+4 >= len(args) { // not a code-defined rate
			return unsupported(cmd)
		}
		m, ok := args[a+4].(int)
		if !ok {
			return unsupported(cmd)
		}
		acquires += m
		a += 5 + 2*m
	}
	reply, ok := replies.Load(acquires)
	if !ok {
		v := []int64{epoch}
		for range acquires {
			v = append(v, Remaining)
		}
		reply, _ = replies.LoadOrStore(acquires, v)
	}
	c.SetVal(reply.([]int64))
	return nil
}

func unsupported(cmd redis.Cmder) error {
	cmd.SetErr(errUnsupported)
	return errUnsupported
}
