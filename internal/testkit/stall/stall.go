// Package stall measures how long the test process could not run a
// goroutine that was ready to run: the time it waited for a CPU that other
// processes held, behind the process's own goroutines, or through a
// garbage collector's pause. A test that bounds how long a request may take
// adds that time to its bound, so that a loaded machine cannot fail it,
// while a request held by the code under test (a read that ignores its
// deadline, a retry loop) still does: the process runs meanwhile, and the
// monitor sees no stall.
package stall

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// tick is how long the monitor's goroutine sleeps between two looks at the
// clock.
const tick = 5 * time.Millisecond

// jitter is how much later than tick a sleep may end without counting as a
// stall: a timer's ordinary lateness, on an idle machine well under it.
const jitter = time.Millisecond

// A Monitor records the stalls of the process: a goroutine sleeps tick in a
// loop, and each sleep that ends more than jitter late is a stall, from the
// time the goroutine was due to wake to the time it ran. Every goroutine
// woken meanwhile (by a timer, a socket, a channel) waited as long, give or
// take the scheduler's order. A Monitor is safe for concurrent use by
// multiple goroutines.
type Monitor struct {
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	spans  []span    // the stalls so far, in order
	awake  time.Time // when the goroutine last ran
	closed bool
}

// span is one stall: the monitor was due to run at from and ran at to.
type span struct{ from, to time.Time }

// Watch starts a Monitor for the rest of t: it stops when t's cleanups run.
func Watch(t testing.TB) *Monitor {
	m := &Monitor{stop: make(chan struct{}), done: make(chan struct{}), awake: time.Now()}
	go m.run()
	t.Cleanup(m.Stop)
	return m
}

func (m *Monitor) run() {
	defer close(m.done)
	for {
		due := time.Now().Add(tick)
		select {
		case <-m.stop:
			return
		case <-time.After(tick):
		}
		now := time.Now()
		m.mu.Lock()
		if now.Sub(due) > jitter {
			m.spans = append(m.spans, span{due, now})
		}
		m.awake = now
		m.mu.Unlock()
	}
}

// Stop ends the monitor. The stalls it recorded stay readable.
func (m *Monitor) Stop() {
	m.mu.Lock()
	closed := m.closed
	m.closed = true
	m.mu.Unlock()
	if !closed {
		close(m.stop)
		<-m.done
	}
}

// During returns how much of the interval from from to to the process spent
// stalled. It first waits (up to a second) until the monitor has run after
// to, so that a stall that was still going on at to is counted whole.
func (m *Monitor) During(from, to time.Time) time.Duration {
	for wait := time.Now().Add(time.Second); time.Now().Before(wait); time.Sleep(tick) {
		m.mu.Lock()
		caught := m.closed || m.awake.After(to)
		m.mu.Unlock()
		if caught {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for i := sort.Search(len(m.spans), func(i int) bool { return m.spans[i].to.After(from) }); i < len(m.spans); i++ {
		s := m.spans[i]
		if !s.from.Before(to) {
			break
		}
		d += earlier(s.to, to).Sub(later(s.from, from))
	}
	return d
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Longest returns the longest stall recorded so far, for a test's log.
func (m *Monitor) Longest() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, s := range m.spans {
		d = max(d, s.to.Sub(s.from))
	}
	return d
}
