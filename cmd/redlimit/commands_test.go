package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// Every command against a live Redis reaches what the application's
// policies read: the keys its requests left, whatever their characters, a
// key's state, its reset and its override; text and JSON alike.
func TestCommands(t *testing.T) {
	redistest.Need(t)
	srv := redistest.Shared(t)
	bin := build(t)
	rdb := srv.Client(t)
	a := newApp(t, func(prefix string) *core.Client {
		c, err := core.New(rdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		return c
	})
	users := []string{"alice", "a/b", "c:d", "with space", "{x}", "-dash"}
	for _, u := range users {
		for range 3 {
			require.Equal(t, 200, a.request(t, u))
		}
	}
	require.Equal(t, 200, a.request(t, "")) // no user: by its address
	url := "redis://" + srv.Addr
	user := []string{"-redis", url, "-prefix", a.prefix, "-policy", "user", "-rate", "3/m"}
	exports := []string{"-redis", url, "-prefix", a.prefix, "-policy", "exports", "-concurrency", "2"}
	cli := func(args ...string) result {
		t.Helper()
		r := command(t, bin, "", args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		return r
	}

	r := cli("-redis", url, "check")
	assert.Equal(t, "ok: redis at "+srv.Addr+" can decide\n", r.stdout)
	assert.Equal(t, map[string]any{"ok": true, "redis": srv.Addr}, decoded(t, cli("-redis", url, "-json", "check").stdout))
	r = command(t, bin, url, "check") // REDIS_URL
	assert.Equal(t, 0, r.code, r.stderr)

	want := append(slices.Clone(users), ":ip:192.0.2.1")
	slices.Sort(want)
	got := strings.Split(strings.TrimSpace(cli(append(user, "ls")...).stdout), "\n")
	slices.Sort(got)
	assert.Equal(t, want, got)
	ls := decoded(t, cli(append(user, "-json", "ls")...).stdout)
	assert.Len(t, ls["keys"], len(want))
	assert.Equal(t, false, ls["truncated"])
	ls = decoded(t, cli(append(user[:6], "ls", "-json", "-limit", "2")...).stdout) // no limit needed; flags after
	assert.Len(t, ls["keys"], 2)
	assert.Equal(t, true, ls["truncated"])

	for _, u := range users {
		r := cli(append(user, "peek", "--", u)...)
		assert.Contains(t, r.stdout, "allowed      false", u)
		assert.Contains(t, r.stdout, "remaining    0 of 3/m", u)
		s := decoded(t, cli(append(user, "-json", "peek", "--", u)...).stdout)
		assert.Equal(t, u, s["key"])
		assert.Equal(t, false, s["allowed"], u)
		assert.EqualValues(t, 0, s["remaining"], u)
		assert.EqualValues(t, 3, s["limit"], u)
		assert.EqualValues(t, 60000, s["interval_ms"], u)
		assert.Positive(t, s["retry_after_ms"], u)
		assert.NotContains(t, s, "override", u)

		assert.Equal(t, "user "+u+": override 5/m\n", cli(append(user, "override", "set", "--", u, "5")...).stdout)
		limit, ok, err := a.user.Override(bg, u)
		require.NoError(t, err)
		assert.True(t, ok, u)
		assert.EqualValues(t, 5, limit, "%q: the application's policy reads it", u)
		o := decoded(t, cli(append(user, "-json", "override", "get", "--", u)...).stdout)
		assert.Equal(t, map[string]any{"policy": "user", "key": u, "limit": 5.0}, o)
		s = decoded(t, cli(append(user, "-json", "peek", "--", u)...).stdout)
		assert.EqualValues(t, 5, s["override"], u)
		assert.EqualValues(t, 2, s["remaining"], "%q: 3 taken of 5", u)

		assert.Equal(t, "user "+u+": override removed\n", cli(append(user, "override", "rm", "--", u)...).stdout)
		o = decoded(t, cli(append(user, "-json", "override", "rm", "--", u)...).stdout)
		assert.Equal(t, map[string]any{"policy": "user", "key": u, "limit": nil}, o, "removed, or none to remove")
		_, ok, err = a.user.Override(bg, u)
		require.NoError(t, err)
		assert.False(t, ok, u)
		assert.Equal(t, "user "+u+": no override\n", cli(append(user, "override", "get", "--", u)...).stdout)

		assert.Equal(t, "user "+u+": reset\n", cli(append(user, "reset", "--", u)...).stdout)
		p, err := a.user.Peek(bg, u)
		require.NoError(t, err)
		assert.EqualValues(t, 3, p.Remaining, "%q reset", u)
	}
	r = cli(append(user, "-json", "reset", ":ip:192.0.2.1")...)
	assert.Equal(t, map[string]any{"policy": "user", "key": ":ip:192.0.2.1", "reset": true}, decoded(t, r.stdout))

	s := decoded(t, cli(append(exports, "-json", "peek", "bob")...).stdout)
	assert.EqualValues(t, 2, s["remaining"])
	assert.NotContains(t, s, "interval_ms", "a concurrency limit's")
	assert.Equal(t, "exports bob: override 4\n", cli(append(exports, "override", "set", "bob", "4")...).stdout)
	r = cli(append(exports, "peek", "bob")...)
	assert.Contains(t, r.stdout, "remaining  4 of 4 in flight")
	assert.Contains(t, r.stdout, "override   4")
	p, err := a.exports.Peek(bg, "bob")
	require.NoError(t, err)
	assert.EqualValues(t, 4, p.Remaining, "the application's policy applies it")
}

// Against a port where nothing listens, every command says so in one line
// and exits 1, within its timeout.
func TestRedisDown(t *testing.T) {
	bin := build(t)
	url := deadURL(t)
	addr := strings.TrimPrefix(url, "redis://")
	for _, args := range [][]string{
		{"check"}, {"-json", "check"}, {"ls"}, {"peek", "alice"}, {"reset", "alice"},
		{"override", "get", "alice"}, {"override", "set", "alice", "5"}, {"override", "rm", "alice"},
	} {
		r := command(t, bin, "", append([]string{"-redis", url, "-timeout", "3s", "-policy", "user", "-rate", "3/m"}, args...)...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, addr, args)
		assert.Contains(t, r.stderr, "connection refused", args)
		if slices.Contains(args, "-json") {
			out := decoded(t, r.stdout)
			assert.Equal(t, false, out["ok"])
			assert.Contains(t, out["error"], "unreachable")
		} else {
			assert.Empty(t, r.stdout, args)
		}
	}
}

// A mistake in the command line is said in one line, with exit status 2,
// before any I/O: the Redis is a port where nothing listens, which would
// exit 1.
func TestUsage(t *testing.T) {
	bin := build(t)
	url := deadURL(t)
	r := command(t, bin, "", "-h")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Usage: redlimit")
	assert.Contains(t, command(t, bin, "", "help").stdout, "override set KEY LIMIT")
	pol := []string{"-redis", url, "-policy", "user", "-rate", "3/m"}
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "no command"},
		{[]string{"-redis", url}, "no command"},
		{[]string{"check"}, "no Redis: give -redis URL, or set REDIS_URL"},
		{[]string{"-redis", url, "frob"}, `unknown command "frob"`},
		{[]string{"-redis", url, "override"}, "override needs get, set or rm"},
		{[]string{"-redis", url, "override", "frob", "k"}, `unknown command "override frob"`},
		{[]string{"-redis", url, "-nope", "check"}, "flag provided but not defined: -nope"},
		{[]string{"-redis", url, "-timeout", "soon", "check"}, "-timeout"},
		{[]string{"-redis", url, "-timeout", "0s", "check"}, "-timeout 0s"},
		{[]string{"-redis", url, "peek", "alice"}, "-policy NAME"},
		{[]string{"-redis", url, "-policy", "user", "peek", "alice"}, "-rate RATE, -concurrency N or -quota QUOTA"},
		{[]string{"-redis", url, "-policy", "user", "-quota", "3/day", "-rate", "3/m", "peek", "alice"}, "one limit"},
		{[]string{"-redis", url, "-policy", "user", "-quota", "3", "peek", "alice"}, "LIMIT/PERIOD"},
		{[]string{"-redis", url, "-policy", "user", "-quota", "3/fortnight", "peek", "alice"}, `the period "fortnight" is not day, week or month`},
		{[]string{"-redis", url, "-policy", "user", "-quota", "x/day", "peek", "alice"}, `the limit "x" is not a whole number`},
		{[]string{"-redis", url, "-policy", "user", "-quota", "0/day", "peek", "alice"}, "quota limit 0 not in"},
		{[]string{"-redis", url, "-policy", "user", "-quota", "3/day Mars/Olympus", "peek", "alice"}, "time zone"},
		{[]string{"-redis", url, "-policy", "user", "-quota", "3/day UTC extra", "peek", "alice"}, "LIMIT/PERIOD"},
		{[]string{"-redis", url, "-policy", "user", "-rate", "3/m", "-concurrency", "2", "peek", "alice"}, "one limit"},
		{[]string{"-redis", url, "-policy", "user", "-rate", "3/fortnight", "peek", "alice"}, "invalid rate"},
		{[]string{"-redis", url, "-policy", "user", "-concurrency", "20000", "peek", "alice"}, "invalid permits"},
		{[]string{"-redis", url, "-policy", "", "-rate", "3/m", "ls"}, "-policy NAME"},
		{[]string{"-redis", url, "-policy", "bad\tname", "-rate", "3/m", "ls"}, "printable ASCII"},
		{[]string{"-redis", url, "-prefix", "{", "-policy", "user", "ls"}, "-prefix"},
		{append(pol, "peek"), "peek takes 1 argument(s), not 0"},
		{append(pol, "peek", "a", "b"), "peek takes 1 argument(s), not 2"},
		{append(pol, "peek", ""), "an empty key"},
		{append(pol, "-limit", "-1", "ls"), "-limit -1"},
		{append(pol, "override", "set", "alice"), "override set takes 2 argument(s)"},
		{append(pol, "override", "set", "alice", "many"), `LIMIT "many"`},
		{append(pol, "override", "set", "alice", "0"), `LIMIT "0"`},
		{[]string{"-redis", url, "-policy", "exports", "-concurrency", "2", "override", "set", "bob", "10001"}, "invalid permits"},
		{[]string{"-redis", "http://example.com", "check"}, "invalid URL scheme"},
		{[]string{"-cluster", "-redis", "redis://h:notaport?addr=h2:1", "check"}, "notaport"},
	} {
		r := command(t, bin, "", c.args...)
		assert.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.says, c.args)
		assert.Empty(t, r.stdout, c.args)
	}
}

// No output tells the URL's password, or a part of it: with the right
// password, a wrong one, none, or a URL that the password breaks.
func TestPasswordNeverShown(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	const secret = "Zq9Xw7pa55"
	_, err = srv.CLI("config", "set", "requirepass", secret)
	require.NoError(t, err)
	bin := build(t)
	for _, c := range []struct {
		url  string
		code int
		says string
	}{
		{"redis://:" + secret + "@" + srv.Addr, 0, "ok: redis at " + srv.Addr},
		{"redis://default:" + secret + "@" + srv.Addr + "/0", 0, "ok"},
		{"redis://:" + secret + "x@" + srv.Addr, 1, "refused the username or password"},
		{"redis://" + srv.Addr, 1, "requires a password"},
		{"redis://:" + secret + "@" + srv.Addr + "/zero", 2, "invalid database number"},
		{"redis://:Zq9/Xw7pa55@" + srv.Addr, 2, "user information"},
		{"redis://:Zq9 Xw7pa55@" + srv.Addr, 2, "user information"},
		{"redis://:" + secret + "@127.0.0.1:notaport", 2, "invalid port"},
	} {
		for _, args := range [][]string{
			{"check"}, {"-json", "check"},
			{"-policy", "user", "-rate", "3/m", "peek", "alice"},
			{"-policy", "user", "-rate", "3/m", "-json", "override", "set", "alice", "5"},
		} {
			r := command(t, bin, c.url, args...)
			assert.Equal(t, c.code, r.code, "%s %v: %s", c.url, args, r.stderr)
			assert.False(t, tells(r.stdout+r.stderr, secret), "%s %v: %s%s", c.url, args, r.stdout, r.stderr)
			if args[0] == "check" {
				assert.Contains(t, r.stdout+r.stderr, c.says, "%s %v", c.url, args)
			}
		}
	}
}

// tells reports whether s holds secret, or a part of it of 4 characters
// or more.
func tells(s, secret string) bool {
	for i := range len(secret) - 3 {
		for j := i + 4; j <= len(secret); j++ {
			if strings.Contains(s, secret[i:j]) {
				return true
			}
		}
	}
	return false
}

// With -cluster, the commands reach a Redis Cluster's every master: the
// keys the application left on each, and their state.
func TestCluster(t *testing.T) {
	redistest.Need(t)
	cluster := redistest.SharedCluster(t)
	bin := build(t)
	rdb := cluster.Client(t)
	a := newApp(t, func(prefix string) *core.Client {
		c, err := core.New(rdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		return c
	})
	var users []string
	for i := range 20 { // keys in the slots of every master
		users = append(users, "u"+strings.Repeat("x", i))
		require.Equal(t, 200, a.request(t, users[i]))
	}
	addrs := cluster.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	user := []string{"-cluster", "-redis", url, "-prefix", a.prefix, "-policy", "user", "-rate", "3/m"}

	r := command(t, bin, "", "-cluster", "-redis", url, "check")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ok: redis at "+addrs[0])
	r = command(t, bin, "", append(user, "ls")...)
	require.Equal(t, 0, r.code, r.stderr)
	got := strings.Fields(r.stdout)
	slices.Sort(got)
	assert.Equal(t, users, got)
	r = command(t, bin, "", append(user, "override", "set", users[7], "9")...)
	require.Equal(t, 0, r.code, r.stderr)
	r = command(t, bin, "", append(user, "-json", "peek", users[7])...)
	require.Equal(t, 0, r.code, r.stderr)
	s := decoded(t, r.stdout)
	assert.EqualValues(t, 8, s["remaining"], "1 taken of 9")
}

// A quota (-quota) is reached as the application's: peek tells its
// period's count, reset forgets it, and an override is per its period.
func TestQuotaCommands(t *testing.T) {
	redistest.Need(t)
	srv := redistest.Shared(t)
	bin := build(t)
	prefix := "quota" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	c, err := core.New(srv.Client(t), core.WithKeyPrefix(prefix))
	require.NoError(t, err)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	daily := policy.MustNewQuota(c, "daily", core.Quota{Limit: 3, Period: core.Day, Location: paris},
		policy.WithKey(keyfunc.Header("X-User")))
	serve := nethttprl.New(daily)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	request := func() int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		serve.ServeHTTP(w, r)
		return w.Code
	}
	for range 3 {
		require.Equal(t, http.StatusOK, request())
	}
	require.Equal(t, http.StatusTooManyRequests, request())
	quota := []string{"-redis", "redis://" + srv.Addr, "-prefix", prefix, "-policy", "daily", "-quota", "3/day Europe/Paris"}
	cli := func(args ...string) result {
		t.Helper()
		r := command(t, bin, "", append(slices.Clone(quota), args...)...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		return r
	}

	assert.Equal(t, "alice\n", cli("ls").stdout)
	r := cli("peek", "alice")
	assert.Contains(t, r.stdout, "allowed      false")
	assert.Contains(t, r.stdout, "remaining    0 of 3/day")
	s := decoded(t, cli("-json", "peek", "alice").stdout)
	assert.Equal(t, false, s["allowed"])
	assert.EqualValues(t, 3, s["limit"])
	assert.Positive(t, s["retry_after_ms"])

	assert.Equal(t, "daily alice: override 5/day\n", cli("override", "set", "alice", "5").stdout)
	assert.Contains(t, cli("peek", "alice").stdout, "remaining    2 of 5/day", "the override, with the period's count")
	assert.Equal(t, "daily alice: override removed\n", cli("override", "rm", "alice").stdout)

	assert.Equal(t, "daily alice: reset\n", cli("reset", "alice").stdout)
	assert.Contains(t, cli("peek", "alice").stdout, "remaining    3 of 3/day")
	// Within a second (the application's denial cache, see
	// core.WithDenialCache), the application's policy sees the reset.
	deadline := time.Now().Add(3 * time.Second)
	for request() != http.StatusOK {
		require.True(t, time.Now().Before(deadline), "the application's policy never saw the reset")
		time.Sleep(50 * time.Millisecond)
	}
}
