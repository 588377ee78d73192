package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// The burst lets a start of the fallback pass only during a long silence
// of Redis or just after one.
func TestExcusedOnlyInOrJustAfterALongSilence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	long := redistest.Silence{From: at(1000), To: at(1000).Add(burstSilence)}
	short := redistest.Silence{From: at(1000), To: at(1000).Add(burstSilence - time.Millisecond)}
	end := long.To
	for _, c := range []struct {
		name     string
		start    time.Time
		silences []redistest.Silence
		want     bool
	}{
		{"no silence", at(1100), nil, false},
		{"before the silence", at(999), []redistest.Silence{long}, false},
		{"as it begins", at(1000), []redistest.Silence{long}, true},
		{"during it", at(1200), []redistest.Silence{long}, true},
		{"just after it", end.Add(burstOutageLag - time.Millisecond), []redistest.Silence{long}, true},
		{"the lag after it", end.Add(burstOutageLag), []redistest.Silence{long}, false},
		{"during a silence too short", at(1200), []redistest.Silence{short}, false},
		{"after a short one, during a long one", at(5000), []redistest.Silence{short, {From: at(4900), To: at(4900).Add(burstSilence)}}, true},
	} {
		assert.Equal(t, c.want, excused(c.start, c.silences), c.name)
	}
}
