package faultproxy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/internal/testkit/faultproxy"
)

// Every test closes what it opens: Close leaks no goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is an upstream that writes back what it reads, so the proxy's
// server→client stream is what the client wrote.
type echo struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads len(want) bytes back within d.
func roundTrip(t *testing.T, c net.Conn, msg, want string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := readN(t, c, len(want), d)
	if got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
	return time.Since(start)
}

func readN(t *testing.T, c net.Conn, n int, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// silent asserts that nothing arrives on c within d.
func silent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 1)
	n, err := c.Read(b)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %q, %v: want nothing", b[:n], err)
	}
}

func TestForwardsBothWays(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "+a\r\n", "+a\r\n", 5*time.Second)
	roundTrip(t, b, "+b\r\n", "+b\r\n", 5*time.Second)
	big := bytes.Repeat([]byte("x"), 1<<20) // more than any buffer: many chunks
	msg := "$" + "1048576\r\n" + string(big) + "\r\n"
	go func() { _, _ = a.Write([]byte(msg)) }()
	if got := readN(t, a, len(msg), 10*time.Second); got != msg {
		t.Fatal("a 1 MiB reply was not forwarded intact")
	}
	if got := p.Conns(); got != 2 {
		t.Fatalf("%d connections, want 2", got)
	}
}

func TestLatencyPerDirectionDoesNotAccumulate(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, ":0\r\n", ":0\r\n", 5*time.Second) // connected
	p.SetLatency(0, 150*time.Millisecond)
	if d := roundTrip(t, c, ":1\r\n", ":1\r\n", 5*time.Second); d < 150*time.Millisecond {
		t.Fatalf("down latency: round trip of %v", d)
	}
	p.SetLatency(150*time.Millisecond, 0)
	if d := roundTrip(t, c, ":2\r\n", ":2\r\n", 5*time.Second); d < 150*time.Millisecond {
		t.Fatalf("up latency: round trip of %v", d)
	}
	// Five messages 30 ms apart with 150 ms of latency: a delay line delivers
	// the last about 150 ms after it was sent, not 5 × 150 ms after the first.
	start := time.Now()
	for i := 0; i < 5; i++ {
		if _, err := c.Write([]byte(":3\r\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	readN(t, c, 5*len(":3\r\n"), 5*time.Second)
	if d := time.Since(start); d < 270*time.Millisecond || d > 650*time.Millisecond {
		t.Fatalf("five chunks took %v, want about 120 ms + 150 ms (sequential delays would take 750 ms)", d)
	}
	p.SetLatency(0, 0)
	if d := roundTrip(t, c, ":4\r\n", ":4\r\n", 5*time.Second); d > 100*time.Millisecond {
		t.Fatalf("latency removed, round trip still %v", d)
	}
}

func TestDropRepliesKeepsTheConnection(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "+ready\r\n", "+ready\r\n", 5*time.Second)

	// Drop the next reply that is an array: the integer before it and the
	// push after it pass, the array is swallowed whole though it arrives
	// byte by byte, and the connection goes on.
	p.DropReplies(1, func(r []byte) bool { return r[0] == '*' })
	stream := ":1\r\n*2\r\n$3\r\nabc\r\n:2\r\n>2\r\n$4\r\nkick\r\n:0\r\n:3\r\n"
	for i := 0; i < len(stream); i++ {
		if _, err := c.Write([]byte{stream[i]}); err != nil {
			t.Fatal(err)
		}
	}
	want := ":1\r\n>2\r\n$4\r\nkick\r\n:0\r\n:3\r\n"
	if got := readN(t, c, len(want), 5*time.Second); got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
	if p.Dropped() != 1 || p.PendingDrops() != 0 {
		t.Fatalf("dropped %d, pending %d", p.Dropped(), p.PendingDrops())
	}

	// Any reply: a push is never one; two drops take the next two replies.
	p.DropReplies(2, nil)
	roundTrip(t, c, ">1\r\n+p\r\n-ERR x\r\n$-1\r\n:9\r\n", ">1\r\n+p\r\n:9\r\n", 5*time.Second)
	silent(t, c, 50*time.Millisecond)
	if p.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", p.Dropped())
	}
	p.DropReplies(5, nil)
	p.DropReplies(0, nil) // cancelled
	roundTrip(t, c, ":10\r\n", ":10\r\n", 5*time.Second)
}

func TestUnframableStreamIsForwardedAsIs(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	c := dial(t, p)
	p.DropReplies(1, nil)
	roundTrip(t, c, "not resp\r\n:1\r\n", "not resp\r\n:1\r\n", 5*time.Second)
	if p.Dropped() != 0 {
		t.Fatal("dropped from a stream it cannot frame")
	}
}

func TestResetAllSendsRST(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "+a\r\n", "+a\r\n", 5*time.Second)
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after reset: %v, want ECONNRESET", err)
	}
	roundTrip(t, dial(t, p), "+b\r\n", "+b\r\n", 5*time.Second) // still accepting
}

func TestBlackhole(t *testing.T) {
	p := start(t, newEcho(t).ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, "+a\r\n", "+a\r\n", 5*time.Second)
	p.SetBlackhole(true)
	if _, err := old.Write([]byte("+held\r\n")); err != nil {
		t.Fatal(err)
	}
	silent(t, old, 150*time.Millisecond)
	fresh := dial(t, p) // accepted: the dial succeeds
	if _, err := fresh.Write([]byte("+lost\r\n")); err != nil {
		t.Fatal(err)
	}
	silent(t, fresh, 150*time.Millisecond)
	p.SetBlackhole(false)
	if got := readN(t, old, len("+held\r\n"), 5*time.Second); got != "+held\r\n" {
		t.Fatalf("held bytes: %q", got)
	}
	silent(t, fresh, 100*time.Millisecond) // never connected upstream
	roundTrip(t, dial(t, p), "+c\r\n", "+c\r\n", 5*time.Second)
}

func TestUnreachableTargetResetsTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c, err := net.Dial("tcp", start(t, addr).Addr())
	if err == nil { // else the RST came before the dial returned
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%v, want ECONNRESET", err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := newEcho(t)
	before := goleak.IgnoreCurrent() // the echo server's own goroutines
	p, err := faultproxy.Start(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	roundTrip(t, c, "+a\r\n", "+a\r\n", 5*time.Second)
	p.SetLatency(time.Hour, time.Hour) // a chunk waiting in each writer
	_, _ = c.Write([]byte("+b\r\n"))
	p.SetBlackhole(true)
	dial(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("still accepting after Close")
	}
	goleak.VerifyNone(t, before) // the proxy's goroutines, and the echo's per-connection ones, ended
}
