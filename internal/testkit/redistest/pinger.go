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

const (
	// pingEvery is how long the pinger waits between an answer and its
	// next PING.
	pingEvery = 10 * time.Millisecond
	// silenceAtLeast is the shortest wait for an answer that the pinger
	// reports as a silence.
	silenceAtLeast = 100 * time.Millisecond
	// pingerStart bounds the pinger's dial and its first PING's answer.
	pingerStart = 10 * time.Second
)

// A Pinger measures how long a server takes to answer, from a process of
// its own: the test binary run again, which sends PING on one connection,
// one at a time, every pingEvery, and reports each wait for an answer of
// silenceAtLeast or more. This process's overload (its goroutines, its
// connection pools, its garbage collector) does not lengthen what it
// measures; a server that answers nothing, or is starved of CPU by the
// machine, does.
type Pinger struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *bufio.Reader
	once     sync.Once
	silences []Silence
	err      error
}

// A Silence is a wait of a PING for its answer: sent at From, answered at
// To (or still unanswered when the Pinger stopped, at To).
type Silence struct{ From, To time.Time }

// WatchAnswers starts a Pinger of the server at addr and returns once the
// server has answered its first PING, within pingerStart; it stops when t's
// cleanups run, if Silences has not stopped it before. The test binary's
// TestMain must call Main.
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
	t.Cleanup(func() { _, _ = p.Silences() })
	p.out = bufio.NewReader(out)
	// The pinger exits, and its output ends, when it cannot start.
	if line, err := p.out.ReadString('\n'); line != "up\n" {
		t.Fatalf("redistest: pinger of %s: %q, %v", addr, line, err)
	}
	return p
}

// Silences stops the Pinger and returns the waits of silenceAtLeast or more
// of its PINGs for their answers, in order, one still unanswered counted up
// to the stop; a connection that failed counts as an answer that never came.
func (p *Pinger) Silences() ([]Silence, error) {
	p.once.Do(func() {
		_ = p.stdin.Close()
		b, _ := io.ReadAll(p.out)
		if err := p.cmd.Wait(); err != nil {
			p.err = fmt.Errorf("redistest: pinger: %w", err)
			return
		}
		for line := range strings.Lines(string(b)) {
			from, to, ok := strings.Cut(strings.TrimSpace(line), " ")
			f, err1 := strconv.ParseInt(from, 10, 64)
			t, err2 := strconv.ParseInt(to, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				p.err = fmt.Errorf("redistest: pinger printed %q", line)
				return
			}
			p.silences = append(p.silences, Silence{time.Unix(0, f), time.Unix(0, t)})
		}
	})
	return p.silences, p.err
}

// runPinger pings the server at addr, says "up" once it answered, and goes
// on until its standard input closes; then it prints each silence, "from
// to" in unix nanoseconds, and exits. It exits with an error when it cannot
// start within pingerStart.
func runPinger(addr string) {
	var (
		mu       sync.Mutex
		sent     time.Time // of the PING waiting for its answer, if one does
		silences []Silence
	)
	note := func(now time.Time) { // with mu held
		if now.Sub(sent) >= silenceAtLeast {
			silences = append(silences, Silence{sent, now})
		}
		sent = time.Time{}
	}
	conn, err := net.DialTimeout("tcp", addr, pingerStart)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinger:", err)
		os.Exit(1)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(pingerStart))
	if _, err = conn.Write([]byte("PING\r\n")); err == nil {
		_, err = r.ReadString('\n')
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinger:", err)
		os.Exit(1)
	}
	_ = conn.SetDeadline(time.Time{})
	fmt.Println("up")
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		mu.Lock()
		if !sent.IsZero() {
			note(time.Now())
		}
		for _, s := range silences {
			fmt.Println(s.From.UnixNano(), s.To.UnixNano())
		}
		os.Exit(0)
	}()
	for {
		mu.Lock()
		sent = time.Now()
		mu.Unlock()
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			select {} // never answered
		}
		if _, err := r.ReadString('\n'); err != nil {
			select {}
		}
		mu.Lock()
		note(time.Now())
		mu.Unlock()
		time.Sleep(pingEvery)
	}
}
