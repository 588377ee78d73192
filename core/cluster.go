package core

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// On a Redis Cluster with coalescing, a Client keeps one batcher per hash
// slot, created on first use: a pipeline then never spans two slots, hence
// two masters, so decisions on the keys of a master that is down or slow
// never wait behind (or share the deadline of) round trips to it. The
// limiter's keys all share one slot, that of its name's hash tag.
type slotBatchers struct {
	max int
	b   [slot.Count]atomic.Pointer[batcher]
}

// batcherFor returns the batcher of l's round trips.
func (c *Client) batcherFor(l *Limiter) *batcher {
	if c.slots == nil {
		return c.batch
	}
	p := &c.slots.b[l.slot]
	if b := p.Load(); b != nil {
		return b
	}
	b := &batcher{c: c, max: c.slots.max, maxQueue: c.batch.maxQueue}
	if p.CompareAndSwap(nil, b) {
		return b
	}
	return p.Load()
}

// clusterSetup readies c for a Cluster client once its options are applied.
func (c *Client) clusterSetup() {
	rc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	c.reload = rc.ReloadState
	if c.batch.max > 0 {
		c.slots = &slotBatchers{max: c.batch.max}
	}
}

// failed notes a round trip that failed with err. On a Redis Cluster, an
// error that is not Redis's reply (a refused connection, a timeout, a
// closed connection) may mean a master was replaced: the Client asks
// go-redis to reload the slot map, which it does at most once at a time.
// go-redis reloads it by itself only on MOVED replies, which a dead master
// never sends, and every ClusterStateReloadInterval (a minute by default):
// without this, the keys of a failed-over master would keep failing for up
// to that long after their replica took over. It returns err.
func (c *Client) failed(err error) error {
	if c.reload != nil && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrOverloaded) {
		var reply redis.Error
		if !errors.As(err, &reply) {
			c.reload(context.Background())
		}
	}
	return err
}
