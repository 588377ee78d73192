package faults_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

// A request in wait mode is answered within its wait and one decision
// while Redis stops answering: once the exact wait is over, the calls that
// get no answer are asked again, each time twice as late, but never past
// the end of the wait. Before, the last pause could start just before the
// end of a 3 s wait and last 320 ms, and the request was answered 3.3 s
// after it came.
func TestAWaitEndsWithinItsBoundWhileRedisIsSilent(t *testing.T) {
	const maxWait, timeout = 3 * time.Second, 100 * time.Millisecond
	s := startRedis(t)
	rdb := newRedis(t, &redis.Options{Addr: s.Addr})
	a := newApp(t, newClient(t, rdb), "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
		policy.WithWait(maxWait), policy.WithTimeout(timeout), policy.WithFailLocal(1))
	const ip = "10.1.1.1"
	require.Equal(t, http.StatusOK, a.do(ip).status)
	waited := make(chan rec)
	go func() { waited <- a.do(ip) }() // waits about 2 s for the permit
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, s.Pause())
	defer func() { require.NoError(t, s.Resume()) }()
	r := <-waited
	t.Logf("answered %d after %v", r.status, r.took().Round(time.Millisecond))
	assert.Less(t, a.ran(r), maxWait+timeout+100*time.Millisecond, "within the wait and one decision, plus the test process's stalls")
}
