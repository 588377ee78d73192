package stall_test

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/internal/testkit/stall"
)

// TestDuringCountsAStoppedProcess stops the test process (SIGSTOP) until a
// child shell continues it (SIGCONT) 200 ms after it started: the monitor
// counts most of those 200 ms as a stall of the interval around them, and
// nothing before it began.
func TestDuringCountsAStoppedProcess(t *testing.T) {
	m := stall.Watch(t)
	time.Sleep(20 * time.Millisecond)
	began := time.Now()
	cont := exec.Command("sh", "-c", "sleep 0.2; kill -CONT "+strconv.Itoa(os.Getpid()))
	require.NoError(t, cont.Start())
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGSTOP))
	// The stop comes when the kernel delivers the signal, which may be
	// after Kill returned: the interval ends once the child has continued
	// the process.
	require.NoError(t, cont.Wait())
	ended := time.Now()
	got := m.During(began, ended)
	t.Logf("stop and continue within %v; the monitor counted %v of it (longest stall %v)",
		ended.Sub(began), got, m.Longest())
	assert.GreaterOrEqual(t, got, 150*time.Millisecond, "the stop: 200 ms from the child's start, less the time the child took to start")
	assert.LessOrEqual(t, got, ended.Sub(began), "no more than the interval")
	assert.Zero(t, m.During(began.Add(-time.Hour), began.Add(-time.Minute)), "no stall before the monitor began")
}
