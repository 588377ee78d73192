package core

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ledger keeps at most maxOwed ops, the oldest going first, and the ops
// of one limiter go in their order, those put back first.
func TestTheLedgerDropsTheOldest(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb)
	require.NoError(t, err)
	q := &c.owed
	q.mu.Lock()
	q.writing = true // no writer: this test pays by hand
	q.mu.Unlock()
	a, b := c.Limiter("a", WithRate(PerMinute(10))), c.Limiter("b", WithRate(PerMinute(10)))
	now := time.Now().UnixMilli()
	first := &op{member: "first", at: now, due: now}
	q.owe(a, first)
	for i := range maxOwed {
		l := b
		if i%2 == 0 {
			l = a
		}
		q.owe(l, &op{member: "m", at: now, due: now})
	}
	assert.EqualValues(t, maxOwed, q.n.Load())
	pay := q.due(a.name, now)
	require.NotNil(t, pay)
	require.Len(t, pay.debts, maxOwed/2)
	assert.NotSame(t, first, pay.debts[0], "the oldest op went")
	q.putBack(a, pay.debts[:2])
	again := q.due(a.name, now)
	require.NotNil(t, again)
	assert.Equal(t, pay.debts[:2], again.debts, "put back first, in order")
	assert.EqualValues(t, maxOwed/2, q.n.Load())
}
