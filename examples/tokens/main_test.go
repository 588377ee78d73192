package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// A client that reserves 100 tokens and uses 12 000 is slowed by its own
// overage: its next request, even of 1 token, waits until that completion
// leaves the minute. Another that reserves 1 000 and uses 100 pays 100.
func TestOverageSlowsTheClient(t *testing.T) {
	h := newHandler(exampletest.Client(t), 1)
	post := func(user, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		if user != "" {
			r.Header.Set("X-User", user)
		}
		h.ServeHTTP(w, r)
		return w
	}

	start := time.Now()
	w := post("greedy", `{"prompt":"hi","max_tokens":100,"use":12000}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"total_tokens":12000`)
	assert.Equal(t, "9900", w.Header().Get("X-RateLimit-Remaining"), "the headers show the reservation")
	w = post("greedy", `{"prompt":"","max_tokens":1,"use":1}`)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	retry, err := strconv.Atoi(w.Header().Get("Retry-After"))
	require.NoError(t, err)
	assert.InDelta(t, time.Until(start.Add(time.Minute)).Seconds(), retry, 1.5, "until that completion leaves the minute")

	w = post("frugal", `{"prompt":"","max_tokens":1000,"use":100}`)
	require.Equal(t, http.StatusOK, w.Code)
	for range 9 {
		require.Equal(t, http.StatusOK, post("frugal", `{"prompt":"","max_tokens":1000,"use":1000}`).Code)
	}
	assert.Equal(t, http.StatusTooManyRequests, post("frugal", `{"prompt":"","max_tokens":1000,"use":1}`).Code,
		"100 + 9 000 used, 1 000 more would pass the 10 000")

	assert.Equal(t, http.StatusForbidden, post("", `{"max_tokens":10}`).Code, "no user: refused")
	assert.Equal(t, http.StatusBadRequest, post("x", `{"max_tokens":0}`).Code, "no reservation: the client's mistake")
}

// The server has the timeouts of a server open to clients, and closes a
// keep-alive connection left idle for its IdleTimeout (shortened here).
func TestServer(t *testing.T) {
	srv := newServer("127.0.0.1:0", newHandler(exampletest.Client(t), 1))
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Positive(t, srv.WriteTimeout)
	assert.Positive(t, srv.IdleTimeout)

	srv.IdleTimeout = 200 * time.Millisecond
	exampletest.IdleClosed(t, exampletest.Serve(t, srv), srv.IdleTimeout)
}
