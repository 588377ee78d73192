package policy_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

func TestNamesDoNotKeepClientsAlive(t *testing.T) {
	mr := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = mr.Close() })
	before := policy.RegisteredClients()
	func() {
		for range 10 {
			c, err := core.New(mr)
			require.NoError(t, err)
			policy.MustNew(c, "x", core.PerMinute(1))
			assert.True(t, policy.Registered(c))
		}
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		return policy.RegisteredClients() <= before
	}, 5*time.Second, 10*time.Millisecond, "the names of collected clients are dropped")
}
