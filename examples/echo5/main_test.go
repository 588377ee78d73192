package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// The server has the timeouts of a server open to clients: it closes a
// keep-alive connection left idle for its IdleTimeout (shortened here), its
// WriteTimeout leaves time for a login that waits for its permit and for an
// export's work, and the API is limited as main says.
func TestServer(t *testing.T) {
	srv := newServer("127.0.0.1:0", newHandler(exampletest.Client(t), 1))
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Greater(t, srv.WriteTimeout, 3*time.Second, "longer than the login limit's wait")
	assert.Greater(t, srv.WriteTimeout, exportTime, "longer than an export")
	assert.Positive(t, srv.IdleTimeout)

	srv.IdleTimeout = 200 * time.Millisecond
	addr := exampletest.Serve(t, srv)
	exampletest.IdleClosed(t, addr, srv.IdleTimeout) // 1 of the 10 requests per 10 s
	exampletest.LoginWaits(t, addr)                  // 2 more
	exampletest.ExportsInFlight(t, addr)             // 3 more: the export refused gives its permit back
	exampletest.Limited(t, addr, 4)
}
