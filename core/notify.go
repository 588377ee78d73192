package core

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notices tell a Client's semaphore waiters that permits came back: the
// semaphore scripts publish on a semaphore's channel whenever they free
// permits (as Redisson's do), and the channels that have waiters in this
// process are subscribed while they have them. On one server (or a
// Sentinel client's master) one connection subscribes to them all; on a
// Cluster, whose scripts publish with SPUBLISH to the channel's own slot,
// each channel has a connection of its own, at most maxClusterChannels at
// once (the waiters of the others ask Redis every pollEvery instead).
// A notice only wakes the waiters: they ask Redis again, which decides.
type notices struct {
	c  *Client
	mu sync.Mutex
	ps *redis.PubSub // one server: the connection of every channel, or nil
	// chans: per channel with waiters, the channel closed at its next
	// notice, the waiters on it, and its connection on a Cluster.
	chans map[string]*notice
}

type notice struct {
	next    chan struct{}
	waiters int
	ps      *redis.PubSub // a Cluster's, or nil
}

// pollEvery is how often a semaphore waiter asks Redis again when no
// notice came: permits whose lease ended come back without one, and a
// notice can be missed (one published before the subscription took
// effect, or while it was reconnecting).
const pollEvery = 250 * time.Millisecond

// maxClusterChannels bounds the channels subscribed at once on a Cluster.
const maxClusterChannels = 64

// wait returns the channel that the next notice on channel closes, and a
// function that ends the wait; the caller calls it once, when it stops
// waiting. While a wait is on, the channel is subscribed.
func (n *notices) wait(channel string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans == nil {
		n.chans = map[string]*notice{}
	}
	no := n.chans[channel]
	if no == nil {
		no = &notice{next: make(chan struct{})}
		n.chans[channel] = no
		n.subscribe(channel, no)
	}
	no.waiters++
	return no.next, func() { n.leave(channel, no) }
}

// next returns the channel that the next notice on channel closes, for a
// waiter already counted.
func (n *notices) next(channel string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.chans[channel].next
}

// leave ends a wait on channel; the last waiter unsubscribes it.
func (n *notices) leave(channel string, no *notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if no.waiters--; no.waiters > 0 {
		return
	}
	delete(n.chans, channel)
	switch {
	case no.ps != nil:
		_ = no.ps.Close()
	case n.ps != nil && len(n.chans) == 0:
		_ = n.ps.Close()
		n.ps = nil
	case n.ps != nil:
		_ = n.ps.Unsubscribe(context.Background(), channel)
	}
}

// subscribe subscribes channel, whose notice is no, under n.mu. A
// subscription that fails leaves the waiters to poll.
func (n *notices) subscribe(channel string, no *notice) {
	ctx := context.Background()
	if cc, ok := n.c.rdb.(*redis.ClusterClient); ok {
		cluster := 0
		for _, o := range n.chans {
			if o.ps != nil {
				cluster++
			}
		}
		if cluster >= maxClusterChannels {
			return
		}
		no.ps = cc.SSubscribe(ctx, channel)
		go n.receive(no.ps)
		return
	}
	if n.ps == nil {
		n.ps = n.c.rdb.Subscribe(ctx, channel)
		go n.receive(n.ps)
		return
	}
	_ = n.ps.Subscribe(ctx, channel)
}

// receive wakes the waiters of each notice that ps receives, until ps is
// closed.
func (n *notices) receive(ps *redis.PubSub) {
	for m := range ps.Channel() {
		n.mu.Lock()
		if no := n.chans[m.Channel]; no != nil {
			close(no.next)
			no.next = make(chan struct{})
		}
		n.mu.Unlock()
	}
}
