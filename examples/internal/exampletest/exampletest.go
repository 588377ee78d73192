// Package exampletest holds what the examples' tests share: a redlimit
// client on an embedded Redis, and checks of an example server running on
// a local port, as a client sees it.
package exampletest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
)

// Client returns a redlimit client with the examples' key prefix, on an
// embedded Redis of the test's own, both closed when the test ends.
func Client(t testing.TB) *core.Client {
	t.Helper()
	addr, stop, err := embedded.Start()
	require.NoError(t, err)
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb, core.WithKeyPrefix("example:"))
	require.NoError(t, err)
	return c
}

// Serve serves srv on a free local port until the test ends, and returns
// its address.
func Serve(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// IdleClosed checks that the server at addr closes a keep-alive connection
// left idle for idle: it sends GET / on a new connection, reads the answer,
// whatever its status, and waits for the server to close the connection, a
// second longer than idle at most.
func IdleClosed(t testing.TB, addr string, idle time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	res, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	require.False(t, res.Close, "the server keeps the connection alive after an answer")

	answered := time.Now()
	require.NoError(t, conn.SetReadDeadline(answered.Add(idle+time.Second)))
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the connection is still open %v after the answer", time.Since(answered))
	assert.GreaterOrEqual(t, time.Since(answered), idle/2, "closed before it was idle for its timeout")
}

// LoginWaits checks that the demo's login limit, 1 per 2 s per IP waiting up
// to 3 s for a permit, fits in the timeouts of the server at addr: of two
// logins at once, the second waits about 2 s for its permit, and is
// answered 200.
func LoginWaits(t testing.TB, addr string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	login := func() (int, error) {
		res, err := client.Post("http://"+addr+"/login", "text/plain", nil)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		return res.StatusCode, err
	}
	code, err := login()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the first login")
	start := time.Now()
	code, err = login()
	require.NoError(t, err, "the second login, after %v", time.Since(start))
	assert.Equal(t, http.StatusOK, code, "the second login")
	assert.Greater(t, time.Since(start), time.Second, "the second login waited for its permit")
}

// Limited checks the demo's global limit, 10 requests per 10 s per IP, at
// addr: GET /health is not limited, and GET / is served left more times,
// then refused with a 429 and a Retry-After.
func Limited(t testing.TB, addr string, left int) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path string) *http.Response {
		t.Helper()
		res, err := client.Get("http://" + addr + path)
		require.NoError(t, err)
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		return res
	}
	for i := range 12 {
		require.Equal(t, http.StatusOK, get("/health").StatusCode, "GET /health #%d", i+1)
	}
	for i := range left {
		require.Equal(t, http.StatusOK, get("/").StatusCode, "GET / #%d of the %d left", i+1, left)
	}
	res := get("/")
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "GET / over the limit")
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
}

// ExportsInFlight checks the demo's export limit, at most 2 exports in
// flight at once per user, at addr: of three GET /export for alice at once,
// one is refused at once with a 429 whose RateLimit headers name the
// concurrency limit and which has no Retry-After (when a slot frees is not
// known), and the other two are served when their work is done. Bob's
// export, sent while alice's two hold her slots, is served: each user has
// slots of their own. Of the global limit, the three served take 3
// requests; the refused one gives its permit back.
func ExportsInFlight(t testing.TB, addr string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	type answer struct {
		code   int
		header http.Header
		err    error
	}
	export := func(user string) answer {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/export", nil)
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set("X-User", user)
		res, err := client.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		return answer{res.StatusCode, res.Header, err}
	}

	answers := make(chan answer, 3)
	for range 3 {
		go func() { answers <- export("alice") }()
	}
	// The refusal comes first, while alice's two exports still run.
	first := <-answers
	require.NoError(t, first.err)
	bob := export("bob")
	alice := []answer{first, <-answers, <-answers}

	codes := map[int]int{}
	for i, a := range alice {
		require.NoError(t, a.err, "alice's export #%d", i+1)
		codes[a.code]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 2, http.StatusTooManyRequests: 1}, codes,
		"statuses of alice's three exports at once")
	require.Equal(t, http.StatusTooManyRequests, first.code, "alice's first answer: the refusal, before the exports end")
	// The headers carry an item for each limit of the request, the global
	// one's too.
	assert.Contains(t, items(first.header, "RateLimit-Policy"), `"exports";q=2;qu="concurrent-requests"`)
	assert.Contains(t, items(first.header, "RateLimit"), `"exports";r=0`)
	assert.Empty(t, first.header.Get("Retry-After"), "a concurrency limit knows no retry time")

	require.NoError(t, bob.err)
	assert.Equal(t, http.StatusOK, bob.code, "bob's export while alice holds her 2 slots")
}

// items returns the list items of the header field name in h.
func items(h http.Header, name string) []string {
	var list []string
	for _, v := range h.Values(name) {
		for item := range strings.SplitSeq(v, ",") {
			list = append(list, strings.TrimSpace(item))
		}
	}
	return list
}
