package redistest

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slow is a go-redis hook that delays every command and pipeline by Delay:
// a Redis that answers late. The wait ends with the call's context, as
// go-redis's I/O does with ContextTimeoutEnabled, unless Busy: then the
// round trip takes Delay whatever happens, as a connection that stays busy.
type Slow struct {
	Delay time.Duration
	Busy  bool
}

func (Slow) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h Slow) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h Slow) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

func (h Slow) wait(ctx context.Context) error {
	if h.Busy {
		time.Sleep(h.Delay)
		return nil
	}
	select {
	case <-time.After(h.Delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
