package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
