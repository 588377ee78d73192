package main

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// The server has the timeouts of a server open to clients: it closes a
// keep-alive connection left idle for its IdleTimeout (shortened here), a
// login that waits for its permit and an export at work are answered all
// the same (fasthttp's WriteTimeout starts once the handler returns), and
// the API is limited as main says.
func TestServer(t *testing.T) {
	app := newApp(exampletest.Client(t), 1)
	cfg := app.Config()
	assert.Positive(t, cfg.ReadTimeout)
	assert.Positive(t, cfg.WriteTimeout)
	assert.Positive(t, cfg.IdleTimeout)

	idle := 200 * time.Millisecond
	app.Server().IdleTimeout = idle
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(time.Second) })
	addr := ln.Addr().String()
	exampletest.IdleClosed(t, addr, idle) // 1 of the 10 requests per 10 s
	exampletest.LoginWaits(t, addr)       // 2 more
	exampletest.ExportsInFlight(t, addr)  // 3 more: the export refused gives its permit back
	exampletest.Limited(t, addr, 4)
}
