package core_test

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
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
	answering := answeringPings(t)
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

	assert.NoError(t, core.Pings(ctx, dial(answering, as)), "an answer")
	start := time.Now()
	assert.ErrorContains(t, core.Pings(ctx, dial(silent.Addr().String(), as)), "no answer to a PING", "silence heard in time: Redis fails")
	t.Logf("silence told in %v", time.Since(start))
	assert.NoError(t, core.Pings(ctx, dial(silent.Addr().String(), late)), "silence heard late: this process cannot tell")
	assert.NoError(t, core.Pings(ctx, dial(answering, late)), "an answer read late still counts")
}

// A dial that times out tells a Redis whose host is gone (its connections
// never made) when this process runs the goroutines that the network
// readies in time. In a process with so many runnable goroutines that they
// run late, while those that timers wake run at once, a dial times out
// although its connection was made, and tells nothing.
func TestADialThatTimesOutCountsOnlyInAProcessThatRunsInTime(t *testing.T) {
	// A dial that gives up after its own timeout (go-redis's DialTimeout,
	// here shorter than the grace), as a timer wakes it.
	timesOut := func(ctx context.Context) (net.Conn, error) {
		<-time.After(500 * time.Millisecond)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	}
	ping := func(timeout time.Duration, dial func(context.Context) (net.Conn, error)) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return core.Pings(ctx, dial)
	}
	// Heard in time, on a machine whose other processes may hold both
	// cores for a while: in one of ten tries.
	var err error
	for range 10 {
		if err = ping(core.RoundTripGrace, timesOut); err != nil {
			break
		}
	}
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a host gone: Redis fails")

	answering := answeringPings(t) // accepts at once
	var dialErr error
	dials := func(ctx context.Context) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", answering)
		dialErr = err
		return c, err
	}

	// As starved on a machine of any size as on one of two cores.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	stop := starve()
	errTimer := ping(core.RoundTripGrace, timesOut)
	errMade := ping(100*time.Millisecond, dials)
	stop()
	assert.NoError(t, errTimer, "a dial that timed out while this process ran its network's goroutines late tells nothing")
	// The connection was made at once, and its dial, run late, timed out
	// all the same.
	var ne net.Error
	require.ErrorAs(t, dialErr, &ne, "the starved dial failed")
	require.True(t, ne.Timeout(), "the starved dial timed out: %v", dialErr)
	assert.NoError(t, errMade, "a dial that timed out although its connection was made tells nothing")
}

// answeringPings starts a server that answers a PING on each connection,
// and returns its address.
func answeringPings(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
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
	return l.Addr().String()
}

// starve keeps every P busy with goroutines that yield each millisecond, as
// a process with thousands of runnable goroutines is: one that the network
// poller readies waits behind hundreds of them (400 ms and more on this
// machine), while one that a timer wakes runs next. It returns once each
// has run, with a func that ends them.
func starve() (stop func()) {
	var done atomic.Bool
	var wg, running sync.WaitGroup
	n := 500 * min(runtime.GOMAXPROCS(0), 8)
	running.Add(n)
	for range n {
		wg.Go(func() {
			running.Done()
			for !done.Load() {
				spins := 0
				for t := time.Now(); time.Since(t) < time.Millisecond; {
					spins++
				}
				runtime.Gosched()
			}
		})
	}
	running.Wait()
	return func() { done.Store(true); wg.Wait() }
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
