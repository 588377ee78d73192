// Package redistest starts real redis-server processes for tests: single
// nodes, clusters and sentinels, each a child process on free local ports,
// stopped when the test binary ends.
//
// The server is redis-server and the client redis-cli, found on PATH, unless
// REDLIMIT_REDIS_SERVER and REDLIMIT_REDIS_CLI name other binaries: for
// instance Valkey's valkey-server and valkey-cli, to run the same tests on
// Valkey. Sentinels are the server binary run with --sentinel.
//
// Without the server binary, tests that need one skip with a message saying
// how to run them; with REDLIMIT_REQUIRE_REDIS=1 in the environment (as in
// CI) they fail instead.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRequire names the variable that turns every skip for lack of Redis into
// a test failure.
const EnvRequire = "REDLIMIT_REQUIRE_REDIS"

// EnvServer names the variable that gives the server binary the tests
// start (a path, or a name looked up on PATH); redis-server when it is
// unset or empty. Sentinels are this binary run with --sentinel. It must be
// the server itself, not a wrapper that starts it in another process: a
// server's start is over when the server answering on its port has the
// process id of the one started.
const EnvServer = "REDLIMIT_REDIS_SERVER"

// EnvCLI names the variable that gives the command-line client the harness
// runs (redis-cli when it is unset or empty); it must match the server,
// e.g. valkey-cli for valkey-server.
const EnvCLI = "REDLIMIT_REDIS_CLI"

// Required reports whether tests must fail, not skip, without Redis.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// ServerBinary returns the server binary the tests start: the value of
// REDLIMIT_REDIS_SERVER, or redis-server.
func ServerBinary() string { return binary(EnvServer, "redis-server") }

// CLIBinary returns the command-line client the harness runs: the value of
// REDLIMIT_REDIS_CLI, or redis-cli.
func CLIBinary() string { return binary(EnvCLI, "redis-cli") }

func binary(env, def string) string {
	if b := os.Getenv(env); b != "" {
		return b
	}
	return def
}

// Need skips t, or fails it when Required, if the server binary (see
// ServerBinary) or the command-line client (see CLIBinary) is not
// installed.
func Need(t testing.TB) {
	t.Helper()
	for _, b := range []struct{ env, bin string }{{EnvServer, ServerBinary()}, {EnvCLI, CLIBinary()}} {
		if _, err := exec.LookPath(b.bin); err != nil {
			if Required() {
				t.Fatalf("%v (%s names another binary) and %s=1", err, b.env, EnvRequire)
			}
			t.Skipf("%v (%s names another binary): install redis-server and redis-cli (e.g. apt-get install redis-server) to run this test against real Redis; %s=1 makes this skip a failure", err, b.env, EnvRequire)
		}
	}
}

var (
	mu      sync.Mutex
	running []*Server

	sharedOnce sync.Once
	shared     *Server
	errShared  error
)

// Main runs the tests and then stops every server they started and removes
// their directories, so that a test run leaves nothing behind. Call it
// from TestMain (WatchAnswers needs it). It first removes the directories that test processes which
// ended without cleaning up (killed at a timeout, say) left.
func Main(m *testing.M) {
	if addr := os.Getenv(envPinger); addr != "" {
		runPinger(addr) // this binary was run by WatchAnswers
	}
	removeOrphans()
	code := m.Run()
	StopAll()
	os.Exit(code)
}

// StopAll stops every server started by this package and removes its
// directory.
func StopAll() {
	mu.Lock()
	all := running
	running = nil
	mu.Unlock()
	for _, s := range all {
		_ = s.Stop()
		_ = os.RemoveAll(s.Dir)
	}
}

// dirPrefix starts the name of each server's directory, in the temporary
// directory; ownerFile, in it, holds the pid of the test process that
// started the server.
const (
	dirPrefix = "redlimit-redis-"
	ownerFile = "owner.pid"
)

// removeOrphans removes the server directories whose test process is gone.
func removeOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && perr == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(dir)
		}
	}
}

// Shared returns one standalone server for the whole test binary, started
// on first use. Tests sharing it must use their own key names.
func Shared(t testing.TB) *Server {
	t.Helper()
	Need(t)
	sharedOnce.Do(func() { shared, errShared = Start() })
	if errShared != nil {
		t.Fatalf("start %s: %v", ServerBinary(), errShared)
	}
	return shared
}

// Server is one redis-server child process.
type Server struct {
	Port int
	Addr string // 127.0.0.1:Port
	Dir  string // its working directory (logs, cluster config)

	conf string // config file given first on the command line, if any
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Own starts a redis-server of t's own (args as Start takes them), stops it
// when t ends, and returns a client of it; t is skipped, or fails when
// Redis is required, where redis-server is not installed.
func Own(t testing.TB, args ...string) *redis.Client {
	t.Helper()
	Need(t)
	s, err := Start(args...)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s.Client(t)
}

// Start starts a redis-server on a free port with persistence off. Extra
// arguments are passed on its command line (e.g. "--maxmemory", "1mb").
func Start(args ...string) (*Server, error) {
	return start(false, args)
}

// start starts a redis-server, or a sentinel (redis-server --sentinel on
// an empty, writable config file of its own), on a free port.
func start(sentinel bool, args []string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := startOn(port, sentinel, args)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOn(port int, sentinel bool, args []string) (*Server, error) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, args: args}
	if sentinel {
		// Sentinel rewrites its config file: it must exist and be writable.
		s.conf = filepath.Join(dir, "sentinel.conf")
		s.args = append([]string{"--sentinel"}, args...)
		if err := os.WriteFile(s.conf, nil, 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.launch(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	mu.Lock()
	running = append(running, s)
	mu.Unlock()
	return s, nil
}

func (s *Server) launch() error {
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf)
	}
	argv = append(argv, []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir,
		"--logfile", filepath.Join(s.Dir, "redis.log"), "--daemonize", "no",
	}...)
	argv = append(argv, s.args...)
	cmd := exec.Command(ServerBinary(), argv...)
	// A process group of its own, which Stop kills whole (the server's
	// forks for replication included); and killed if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", ServerBinary(), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	fail := func(err error) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redistest: %s on port %d exited at start: %s", ServerBinary(), s.Port, s.logTail())
		default:
		}
		if pid, err := serverPID(s.Addr); err == nil {
			if pid != cmd.Process.Pid {
				// Another test process's server took the port between
				// the check and the start: this one cannot bind it.
				return fail(fmt.Errorf("redistest: port %d is taken by the server of process %d", s.Port, pid))
			}
			s.mu.Lock()
			s.cmd, s.done = cmd, done
			s.mu.Unlock()
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fail(fmt.Errorf("redistest: %s on port %d not ready: %s", ServerBinary(), s.Port, s.logTail()))
}

// serverPID returns the process id of the server at addr, read with a raw
// INFO, not through go-redis, whose dial retries back off: the launch of a
// server is over when the server that answers on its port is its own.
func serverPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, errors.New(strings.TrimSpace(head))
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
}

// Stop kills the server (like a crash: no save) and waits for it to exit.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return nil
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() error {
	_ = s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Running reports whether the process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Client returns a go-redis client for the server, closed at the end of t.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// CLI runs the command-line client (see CLIBinary) against the server and
// returns its output.
func (s *Server) CLI(args ...string) (string, error) {
	return cli(s.Port, args...)
}

func cli(port int, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, CLIBinary(),
		append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("redistest: %s %s: %w: %s", CLIBinary(), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

// freePort returns a port that is free, and whose cluster bus port (+10000)
// is free too, both below the ports the system gives outgoing connections
// (Linux: 32768 up), so that a server restarted on its port (a Cluster
// node stopped and started again) never finds it, or its bus port, taken by
// a connection of another test meanwhile.
func freePort() (int, error) {
	for i := 0; i < 200; i++ {
		p := 10000 + rand.IntN(32768-10000-10000)
		if portFree(p) && portFree(p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("redistest: no free port")
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
