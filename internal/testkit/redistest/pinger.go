package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// envPinger names the variable that makes the test binary, run by
// WatchAnswers, a pinger of the server at its address instead of a test
// run (see Main).
const envPinger = "REDLIMIT_TEST_PINGER"

// pingEvery is how long the pinger waits between an answer and its next
// PING.
const pingEvery = 10 * time.Millisecond

// A Pinger measures how long a server takes to answer, from a process of
// its own: the test binary run again, which sends PING on one connection,
// one at a time, every pingEvery, and keeps the longest wait for an answer.
// This process's overload (its goroutines, its connection pools, its
// garbage collector) does not lengthen what it measures; a server that
// answers nothing, or is starved of CPU by the machine, does.
type Pinger struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	once  sync.Once
	long  time.Duration
	err   error
}

// WatchAnswers starts a Pinger of the server at addr and returns once the
// server has answered its first PING; it stops when t's cleanups run, if
// Longest has not stopped it before. The test binary's TestMain must call
// Main.
func WatchAnswers(t testing.TB, addr string) *Pinger {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("redistest: pinger: %v", err)
	}
	p := &Pinger{cmd: exec.Command(exe)}
	// A binary built with -race sleeps a second as it exits, unless told.
	p.cmd.Env = append(os.Environ(), envPinger+"="+addr, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	p.cmd.Stderr = os.Stderr
	out, err := p.cmd.StdoutPipe()
	if err == nil {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		t.Fatalf("redistest: pinger: %v", err)
	}
	t.Cleanup(func() { _, _ = p.Longest() })
	p.out = bufio.NewReader(out)
	if line, err := p.out.ReadString('\n'); line != "up\n" {
		t.Fatalf("redistest: pinger of %s: %q, %v", addr, line, err)
	}
	return p
}

// Longest stops the Pinger and returns the longest a PING waited for its
// answer, one still unanswered counted up to the stop; a connection that
// failed counts as an answer that never came.
func (p *Pinger) Longest() (time.Duration, error) {
	p.once.Do(func() {
		_ = p.stdin.Close()
		line, _ := p.out.ReadString('\n')
		if err := p.cmd.Wait(); err != nil {
			p.err = fmt.Errorf("redistest: pinger: %w", err)
			return
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			p.err = fmt.Errorf("redistest: pinger printed %q", line)
		}
		p.long = time.Duration(ns)
	})
	return p.long, p.err
}

// runPinger pings the server at addr, says "up" once it answered, and goes
// on until its standard input closes; then it prints the longest wait for an
// answer, in nanoseconds, and exits.
func runPinger(addr string) {
	var (
		mu      sync.Mutex
		sent    time.Time // of the PING waiting for its answer, if one does
		longest time.Duration
	)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		mu.Lock()
		if !sent.IsZero() {
			longest = max(longest, time.Since(sent))
		}
		fmt.Println(int64(longest))
		os.Exit(0)
	}()
	mu.Lock()
	sent = time.Now()
	mu.Unlock()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		select {} // never answered
	}
	r := bufio.NewReader(conn)
	for {
		mu.Lock()
		sent = time.Now()
		mu.Unlock()
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			select {}
		}
		if _, err := r.ReadString('\n'); err != nil {
			select {}
		}
		mu.Lock()
		if longest == 0 {
			fmt.Println("up")
		}
		longest, sent = max(longest, time.Since(sent), 1), time.Time{}
		mu.Unlock()
		time.Sleep(pingEvery)
	}
}
