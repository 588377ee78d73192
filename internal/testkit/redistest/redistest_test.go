package redistest

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// A test run leaves nothing behind: StopAll stops every server and removes
// its directory, and Main removes the directories of test processes that
// ended without doing so.
func TestNothingLeftBehind(t *testing.T) {
	Need(t)
	var dirs []string
	for range 2 {
		s, err := Start()
		require.NoError(t, err)
		_, err = serverPID(s.Addr)
		require.NoError(t, err)
		dirs = append(dirs, s.Dir)
	}
	StopAll()
	for _, dir := range dirs {
		assert.NoDirExists(t, dir)
	}

	// A directory whose test process is gone, and one whose process runs.
	orphan, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(orphan, ownerFile), []byte("2147483646"), 0o644))
	alive, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(alive) })
	require.NoError(t, os.WriteFile(filepath.Join(alive, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644))
	removeOrphans()
	assert.NoDirExists(t, orphan)
	assert.DirExists(t, alive)
}

// A Pinger reports a server's silence, with its times: the PINGs sent
// while it was stopped, answered once it goes on, and one still unanswered
// when the Pinger stops.
func TestPingerCountsASilence(t *testing.T) {
	Need(t)
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	longest := func(ss []Silence) (l Silence) {
		for _, s := range ss {
			if s.To.Sub(s.From) > l.To.Sub(l.From) {
				l = s
			}
		}
		return l
	}

	p := WatchAnswers(t, s.Addr)
	paused := time.Now()
	require.NoError(t, s.Pause())
	time.Sleep(300 * time.Millisecond)
	resuming := time.Now() // the server may answer before Resume returns
	require.NoError(t, s.Resume())
	time.Sleep(50 * time.Millisecond) // answered meanwhile
	ss, err := p.Silences()
	require.NoError(t, err)
	l := longest(ss)
	assert.GreaterOrEqual(t, l.To.Sub(l.From), 200*time.Millisecond, "the PINGs sent in the 300 ms pause: %v", ss)
	assert.False(t, l.From.Before(paused.Add(-pingEvery-silenceAtLeast)), "began with the pause")
	assert.False(t, l.To.Before(resuming), "ended once it was over")

	p = WatchAnswers(t, s.Addr)
	require.NoError(t, s.Pause())
	defer func() { require.NoError(t, s.Resume()) }()
	time.Sleep(300 * time.Millisecond)
	ss, err = p.Silences()
	require.NoError(t, err)
	l = longest(ss)
	assert.GreaterOrEqual(t, l.To.Sub(l.From), 200*time.Millisecond, "unanswered when the Pinger stopped, 300 ms into the pause: %v", ss)
}

// A Pinger of a server that does not answer fails to start: it does not
// hang.
func TestPingerOfNoServerFails(t *testing.T) {
	Need(t)
	port, err := freePort()
	require.NoError(t, err)
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchAnswers(ft, "127.0.0.1:"+strconv.Itoa(port))
	}()
	<-done
	assert.True(t, ft.failed, "a pinger of no server ends the test")
}

// fatalT records a Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	failed bool
}

func (f *fatalT) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }

// A server started on a port that another server holds fails to start,
// however fast that other server answers: a test never takes another
// process's server for its own.
func TestAPortTakenIsNotTakenOver(t *testing.T) {
	Need(t)
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	_, err = startOn(s.Port, false, nil)
	require.Error(t, err, "taken by the first server (or exited, unable to bind, before the start looked)")
	pid, err := serverPID(s.Addr)
	require.NoError(t, err)
	assert.Equal(t, s.cmd.Process.Pid, pid, "the first server serves on")
}
