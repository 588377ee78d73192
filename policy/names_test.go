package policy_test

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func netipPrefix(t *testing.T, s string) netip.Prefix {
	p, err := netip.ParsePrefix(s)
	require.NoError(t, err)
	return p
}

func newPolicy(t *testing.T, c *core.Client, r core.Rate, opts ...policy.Option) *policy.Policy {
	t.Helper()
	p, err := policy.New(c, r, opts...)
	require.NoError(t, err)
	return p
}

func TestUnnamedPoliciesAreNamedAfterTheirRate(t *testing.T) {
	c, mr := mini(t)
	names := func(rs ...core.Rate) []string {
		var out []string
		for _, r := range rs {
			out = append(out, newPolicy(t, c, r).Name())
		}
		return out
	}
	assert.Equal(t, []string{"100-per-1m", "10-per-10s", "5-per-1500ms", "1-per-2h", "100-per-1m-2", "100-per-1m-3", "5-per-1500ms-2"},
		names(core.PerMinute(100), core.Rate{Permits: 10, Interval: 10 * time.Second}, core.Rate{Permits: 5, Interval: 1500 * time.Millisecond},
			core.Rate{Permits: 1, Interval: 2 * time.Hour}, core.PerMinute(100), core.PerMinute(100), core.Rate{Permits: 5, Interval: 1500 * time.Millisecond}))
	assert.Equal(t, "60-per-1m", newPolicy(t, c, core.Rate{Permits: 60, Interval: 60 * time.Second}).Name())

	// Each client counts its own.
	c2, _ := mini(t)
	assert.Equal(t, "100-per-1m", newPolicy(t, c2, core.PerMinute(100)).Name())

	// A name given on purpose is skipped by the counter.
	newPolicy(t, c, core.PerMinute(7), policy.WithName("7-per-1m-2"))
	assert.Equal(t, []string{"7-per-1m", "7-per-1m-3"}, names(core.PerMinute(7), core.PerMinute(7)))

	// Two unnamed policies never share: each has its own limiter.
	a, b := newPolicy(t, c, core.PerMinute(1)), newPolicy(t, c, core.PerMinute(1))
	r := newReq("192.0.2.1:1")
	decide(t, a, r, policy.Allowed)
	decide(t, b, r, policy.Allowed)
	decide(t, a, r, policy.Denied)
	assert.Subset(t, mr.Keys(), []string{"1-per-1m:192.0.2.1", "1-per-1m-2:192.0.2.1"})
}

func TestSameNameSharesOnlyTheSameLimit(t *testing.T) {
	c, _ := mini(t)
	user := policy.WithKey(keyfunc.User("user"))
	a := newPolicy(t, c, core.PerMinute(2), policy.WithName("shared"), user)
	b := newPolicy(t, c, core.PerMinute(2), policy.WithName("shared"), user, policy.WithCost(2), policy.WithFailClosed())
	r := newReq("192.0.2.1:1")
	r.values["user"] = "alice"
	decide(t, a, r, policy.Allowed)
	decide(t, b, r, policy.Denied) // one permit left, b costs two
	decide(t, a, r, policy.Allowed)

	for _, tc := range []struct {
		name string
		r    core.Rate
		opts []policy.Option
		msg  string
	}{
		{"another rate", core.PerMinute(3), []policy.Option{user}, "has the rate 2 per 1m0s (Overall), and this one 3 per 1m0s (Overall)"},
		{"another rate type", core.Rate{Type: core.PerClient, Permits: 2, Interval: time.Minute}, []policy.Option{user}, "has the rate"},
		{"another key function", core.PerMinute(2), []policy.Option{policy.WithKey(keyfunc.IP())}, "other key functions"},
		{"the default key", core.PerMinute(2), nil, "other key functions"},
		{"more key functions", core.PerMinute(2), []policy.Option{policy.WithKey(keyfunc.User("user"), keyfunc.IP())}, "other key functions"},
		{"another missing-key choice", core.PerMinute(2), []policy.Option{user, policy.WithMissingKeyDeny()}, "WithMissingKeyIP(), and this one WithMissingKeyDeny()"},
	} {
		_, err := policy.New(c, tc.r, append([]policy.Option{policy.WithName("shared")}, tc.opts...)...)
		require.ErrorIs(t, err, core.ErrInvalidOption, tc.name)
		assert.Contains(t, err.Error(), `WithName("shared"): `, tc.name)
		assert.Contains(t, err.Error(), tc.msg, tc.name)
	}

	// What cannot be told apart: the same constructor with other arguments.
	newPolicy(t, c, core.PerMinute(2), policy.WithName("shared"), policy.WithKey(keyfunc.User("other")))

	// The default key and keyfunc.IP() are one key function.
	newPolicy(t, c, core.PerMinute(2), policy.WithName("ip"))
	newPolicy(t, c, core.PerMinute(2), policy.WithName("ip"), policy.WithKey(keyfunc.IP(keyfunc.IPv4PrefixLen(24))))

	// A name an unnamed policy took cannot be given on purpose.
	newPolicy(t, c, core.PerMinute(9))
	_, err := policy.New(c, core.PerMinute(9), policy.WithName("9-per-1m"))
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.Contains(t, err.Error(), "unnamed")

	// Another client has its own names.
	c2, _ := mini(t)
	newPolicy(t, c2, core.PerMinute(3), policy.WithName("shared"))
}

func TestNamesDoNotKeepClientsAlive(t *testing.T) {
	mr := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = mr.Close() })
	before := policy.RegisteredClients()
	func() {
		for range 10 {
			c, err := core.New(mr)
			require.NoError(t, err)
			newPolicy(t, c, core.PerMinute(1), policy.WithName("x"))
			assert.True(t, policy.Registered(c))
		}
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		return policy.RegisteredClients() <= before
	}, 5*time.Second, 10*time.Millisecond, "the names of collected clients are dropped")
}
