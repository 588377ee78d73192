package core

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handLedger returns a Client on no Redis and its ledger, which the test
// pays by hand: no writer runs.
func handLedger(t *testing.T) (*Client, *ledger) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb)
	require.NoError(t, err)
	q := &c.owed
	q.mu.Lock()
	q.writing = true
	q.mu.Unlock()
	return c, q
}

// The ledger keeps at most maxOwed ops, the oldest going first, and the ops
// of one limiter go in their order, those put back first.
func TestTheLedgerDropsTheOldest(t *testing.T) {
	c, q := handLedger(t)
	a, b := c.Limiter("a", WithRate(PerMinute(10))), c.Limiter("b", WithRate(PerMinute(10)))
	now := time.Now().UnixMilli()
	first := &op{member: "first", at: now, due: now}
	q.owe(a, first)
	for i := range maxOwed {
		l := b
		if i%2 == 0 {
			l = a
		}
		q.owe(l, &op{member: strconv.Itoa(i), at: now, due: now})
	}
	assert.EqualValues(t, maxOwed, q.n.Load())
	pay := q.due(a.name, now)
	require.NotNil(t, pay)
	require.Len(t, pay.debts, maxOwed/2)
	assert.NotSame(t, first, pay.debts[0], "the oldest op went")
	q.putBack(a, pay.debts[:2], 0)
	again := q.due(a.name, now)
	require.NotNil(t, again)
	assert.Equal(t, pay.debts[:2], again.debts, "put back first, in order")
	assert.EqualValues(t, maxOwed/2, q.n.Load())
}

// The ops of one grant go in their order, and none goes while an earlier
// one's payment may still run: until Redis answers it or, without an
// answer in time, until its script could only have run. Other grants' ops
// go meanwhile.
func TestAGrantsOpsGoInTheirOrder(t *testing.T) {
	c, q := handLedger(t)
	l := c.Limiter("l", WithRate(PerMinute(10)))
	now := time.Now().UnixMilli()
	mm, om := newMember(1), newMember(1)
	m, other := mm.String(), om.String()
	members := func(p *call) []string {
		if p == nil {
			return nil
		}
		var out []string
		for _, o := range p.debts {
			out = append(out, o.member)
		}
		return out
	}

	q.owe(l, &op{member: m, at: now, due: now})
	charge := q.due(l.name, now)
	require.Equal(t, []string{m}, members(charge))
	refund := &op{member: settledMember(mm, 0), old: m, at: now, due: now}
	q.owe(l, refund)
	q.owe(l, &op{member: other, at: now, due: now})
	otherPay := q.due(l.name, now)
	assert.Equal(t, []string{other}, members(otherPay), "the refund waits while the charge is out")
	q.paid([]*call{otherPay}) // answered

	charge.err = context.DeadlineExceeded // no answer in time: it may yet run
	q.paid([]*call{charge})
	assert.Nil(t, q.due(l.name, now+roundTripGrace.Milliseconds()-1), "not before the late charge could have run")
	again := q.due(l.name, now+roundTripGrace.Milliseconds()+50)
	assert.Equal(t, []string{m, refund.member}, members(again), "the charge again, then its refund, in order")

	again.err = nil // answered
	q.paid([]*call{again})
	later := &op{member: settledMember(om, 0), old: other, at: now, due: now + 5000}
	q.owe(l, later)
	q.owe(l, &op{member: settledMember(om, 2), old: other, at: now, due: now})
	assert.Nil(t, q.due(l.name, now), "a grant's op waits behind its earlier one not yet due")
	assert.Len(t, members(q.due(l.name, now+5000)), 2)
}

// Once its go-redis client is closed, a Client drops what it owes at the
// first payment that finds it closed: it does not go on building a
// payment for every limiter that owes, none of which can be made.
func TestAClosedClientDropsWhatItOwesAtOnce(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	var trips atomic.Int64
	c, err := New(rdb, WithRoundTripHook(func(ctx context.Context, _ []context.Context) (context.Context, func(error)) {
		trips.Add(1)
		return ctx, func(error) {}
	}))
	require.NoError(t, err)
	require.NoError(t, rdb.Close())
	q := &c.owed
	now := time.Now().UnixMilli()
	const owing = 1000
	q.mu.Lock()
	q.writing = true // the writer starts once all is owed
	q.mu.Unlock()
	for i := range owing {
		m := newMember(1)
		q.owe(c.Limiter("l"+strconv.Itoa(i), WithRate(PerMinute(10))), &op{member: m.String(), at: now, due: now})
	}
	q.mu.Lock()
	q.writing = false
	q.grew(0)
	q.mu.Unlock()
	require.Eventually(t, func() bool { return q.n.Load() == 0 }, 10*time.Second, 10*time.Millisecond, "all dropped")
	assert.LessOrEqual(t, trips.Load(), int64(flushWidth), "payments tried after the first that found the client closed: at most those under way")
}
