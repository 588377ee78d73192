package core_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// A PING on a connection of its own tells a Redis that does not answer
// from a process too starved to hear it: no reply read by a goroutine that
// woke in time is Redis's failure; one that woke well past its deadline
// cannot tell, and does not count as one.
func TestPingTellsAStarvedProcessFromASilentRedis(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never replies
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	answering, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = answering.Close() })
	go func() {
		for {
			c, err := answering.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var buf [64]byte
				if _, err := c.Read(buf[:]); err == nil {
					_, _ = c.Write([]byte("+PONG\r\n"))
				}
			}()
		}
	}()
	dial := func(addr string, wrap func(net.Conn) net.Conn) func(context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	as := func(c net.Conn) net.Conn { return c }
	late := func(c net.Conn) net.Conn { return &lateConn{Conn: c} }
	ctx := context.Background()

	assert.True(t, core.Pings(ctx, dial(answering.Addr().String(), as)), "an answer")
	start := time.Now()
	assert.False(t, core.Pings(ctx, dial(silent.Addr().String(), as)), "silence heard in time: Redis fails")
	t.Logf("silence told in %v", time.Since(start))
	assert.True(t, core.Pings(ctx, dial(silent.Addr().String(), late)), "silence heard late: this process cannot tell")
	assert.True(t, core.Pings(ctx, dial(answering.Addr().String(), late)), "an answer read late still counts")
}

// lateConn is a connection whose reader wakes well past its read deadline,
// as a goroutine of a starved process does: each Read that times out
// returns LateWake and more after the deadline.
type lateConn struct {
	net.Conn
	deadline time.Time
}

func (c *lateConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

func (c *lateConn) Read(b []byte) (int, error) {
	// Starved until past the deadline: what the socket holds by then is
	// read, or the deadline's error returned, that late.
	time.Sleep(time.Until(c.deadline) + core.LateWake + 20*time.Millisecond)
	_ = c.Conn.SetReadDeadline(time.Now())
	n, err := c.Conn.Read(b)
	return n, err
}
