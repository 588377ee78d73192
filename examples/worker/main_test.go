package main

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
)

// Jobs are paced at the rate: 25 jobs at 10 per 500 ms take two windows,
// and no window holds more than 10 of them.
func TestWorkerPacesJobs(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	client, stop := demo.Client()
	defer stop()
	var out bytes.Buffer
	r := core.Rate{Permits: 10, Interval: 500 * time.Millisecond}
	start := time.Now()
	require.NoError(t, run(context.Background(), client, r, 25, 4, &out))
	assert.GreaterOrEqual(t, time.Since(start), time.Second-50*time.Millisecond, "25 jobs need 3 windows' worth of permits")

	text := out.String()
	assert.Contains(t, text, "25 jobs in")
	var at []float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && strings.HasSuffix(f[0], "s") && strings.Contains(sc.Text(), "job") {
			s, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "s"), 64)
			require.NoError(t, err)
			at = append(at, s)
		}
	}
	require.Len(t, at, 25)
	for i := range at {
		in := 0
		for j := range at {
			if at[j] <= at[i] && at[j] > at[i]-0.49 {
				in++
			}
		}
		assert.LessOrEqual(t, in, 10, "jobs within one window of the one at %.2fs", at[i])
	}
}
