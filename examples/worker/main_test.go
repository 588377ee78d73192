package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// Jobs are paced at the rate: 25 jobs at 10 per 500 ms take two windows,
// and no window holds more than 10 of them, judged by the times Redis
// recorded for the grants (the log's scores, read while the jobs run: a
// grant stays in the log for the 500 ms window).
func TestWorkerPacesJobs(t *testing.T) {
	client := exampletest.Client(t)
	ctx := context.Background()
	var out bytes.Buffer
	r := core.Rate{Permits: 10, Interval: 500 * time.Millisecond}
	grants := map[string]int64{} // log member -> Redis time of its grant, ms
	log := "{" + client.Limiter("worker:third-party-api").Name() + "}:permits"
	read := func() {
		zs, err := client.Redis().ZRangeWithScores(ctx, log, 0, -1).Result()
		require.NoError(t, err)
		for _, z := range zs {
			grants[z.Member.(string)] = int64(z.Score)
		}
	}
	done := make(chan struct{})
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
				read()
			}
		}
	}()
	start := time.Now()
	err := run(ctx, client, r, 25, 4, &out)
	close(done)
	<-reading
	require.NoError(t, err)
	read()
	assert.GreaterOrEqual(t, time.Since(start), time.Second-50*time.Millisecond, "25 jobs need 3 windows' worth of permits")
	assert.Contains(t, out.String(), "25 jobs in")
	assert.Equal(t, 25, strings.Count(out.String(), " job "), out.String())

	require.Len(t, grants, 25, "every grant seen in the log")
	var at []int64
	for _, ms := range grants {
		at = append(at, ms)
	}
	for _, a := range at {
		in := 0
		for _, b := range at {
			if b >= a && b < a+r.Interval.Milliseconds() {
				in++
			}
		}
		assert.LessOrEqual(t, in, 10, "grants in the window from %d ms", a)
	}
}
