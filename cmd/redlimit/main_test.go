package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// build builds the command into t's temporary directory, and returns its
// path.
func build(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own first on PATH
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "redlimit")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// result is what a run of the command did.
type result struct {
	code           int
	stdout, stderr string
}

// command runs the binary bin with args, REDIS_URL set to redisURL (unset
// when empty), and checks that it says what went wrong in one line on the
// standard error, with no stack trace.
func command(t *testing.T, bin, redisURL string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute) // a hang fails, not a slow run
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "REDIS_URL=") })
	if redisURL != "" {
		cmd.Env = append(cmd.Env, "REDIS_URL="+redisURL)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err, "%v", args)
	}
	assert.LessOrEqual(t, strings.Count(r.stderr, "\n"), 1, "%v: one line at most: %s", args, r.stderr)
	assert.NotContains(t, r.stderr, "goroutine", "%v: no stack trace", args)
	if r.code == 0 {
		assert.Empty(t, r.stderr, "%v", args)
	} else {
		assert.True(t, strings.HasPrefix(r.stderr, "redlimit: "), "%v: %q", args, r.stderr)
	}
	return r
}

// decoded returns the JSON of out.
func decoded(t *testing.T, out string) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%s", out)
	return v
}

// app is an application's policies, on a key prefix of its own: "user",
// 3 requests a minute per user, and "exports", 2 in flight.
type app struct {
	prefix        string
	user, exports *policy.Policy
	serve         http.Handler // GET /, limited by user, the user in X-User
}

func newApp(t *testing.T, c func(prefix string) *core.Client) *app {
	t.Helper()
	a := &app{prefix: "app" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"}
	client := c(a.prefix)
	byUser := policy.WithKey(keyfunc.Header("X-User"))
	a.user = policy.MustNew(client, "user", core.PerMinute(3), byUser)
	a.exports = policy.MustNewConcurrency(client, "exports", 2, byUser)
	a.serve = nethttprl.New(a.user)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	return a
}

// request makes a request of user ("": none, from 192.0.2.1).
func (a *app) request(t *testing.T, user string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if user != "" {
		r.Header.Set("X-User", user)
	}
	w := httptest.NewRecorder()
	a.serve.ServeHTTP(w, r)
	return w.Code
}

// deadURL returns the URL of a local port where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "redis://" + addr
}
