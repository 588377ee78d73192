package redistest

import (
	"os"
	"path/filepath"
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
		require.NoError(t, ping(s.Addr))
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

// A Pinger counts a server's silence: the PINGs sent while it was stopped,
// answered once it goes on, and one still unanswered when the Pinger stops.
func TestPingerCountsASilence(t *testing.T) {
	Need(t)
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })

	p := WatchAnswers(t, s.Addr)
	require.NoError(t, s.Pause())
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, s.Resume())
	time.Sleep(50 * time.Millisecond) // answered meanwhile
	long, err := p.Longest()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, long, 200*time.Millisecond, "the PINGs sent in the 300 ms pause")

	p = WatchAnswers(t, s.Addr)
	require.NoError(t, s.Pause())
	defer func() { require.NoError(t, s.Resume()) }()
	time.Sleep(300 * time.Millisecond)
	long, err = p.Longest()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, long, 200*time.Millisecond, "unanswered when the Pinger stopped, 300 ms into the pause")
}

// A server started on a port that another server holds fails to start,
// however fast that other server answers: a test never takes another
// process's server for its own.
func TestAPortTakenIsNotTakenOver(t *testing.T) {
	Need(t)
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	_, err = startOn(s.Port, false, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "taken by the server of process")
	pid, err := serverPID(s.Addr)
	require.NoError(t, err)
	assert.Equal(t, s.cmd.Process.Pid, pid, "the first server serves on")
}
