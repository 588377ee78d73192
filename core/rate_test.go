package core_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want core.Rate
		text string // MarshalText of want, when not in
	}{
		{"10/s", core.PerSecond(10), ""},
		{"100/m", core.PerMinute(100), ""},
		{"1000/h", core.PerHour(1000), ""},
		{"5000/d", core.PerDay(5000), ""},
		{"50/10s", core.Rate{Permits: 50, Interval: 10 * time.Second}, ""},
		{"3/500ms", core.Rate{Permits: 3, Interval: 500 * time.Millisecond}, ""},
		{"20/1m30s", core.Rate{Permits: 20, Interval: 90 * time.Second}, ""},
		{"7/2d", core.Rate{Permits: 7, Interval: 48 * time.Hour}, ""},
		{"1000/w", core.Rate{Permits: 1000, Interval: 7 * 24 * time.Hour}, ""},
		{"50000/4w", core.Rate{Permits: 50000, Interval: 28 * 24 * time.Hour}, ""},
		{"1000/1w", core.Rate{Permits: 1000, Interval: 7 * 24 * time.Hour}, "1000/w"},
		{"1000/7d", core.Rate{Permits: 1000, Interval: 7 * 24 * time.Hour}, "1000/w"},
		{"1000/168h", core.Rate{Permits: 1000, Interval: 7 * 24 * time.Hour}, "1000/w"},
		{"9/14d", core.Rate{Permits: 9, Interval: 14 * 24 * time.Hour}, "9/2w"},
		{"9/8d", core.Rate{Permits: 9, Interval: 8 * 24 * time.Hour}, ""},
		{"1000/w per-client keepalive=2w", core.Rate{Type: core.PerClient, Permits: 1000, Interval: 7 * 24 * time.Hour, KeepAlive: 14 * 24 * time.Hour}, ""},
		{"10/d keepalive=w", core.Rate{Permits: 10, Interval: 24 * time.Hour, KeepAlive: 7 * 24 * time.Hour}, ""},
		{"100/1m", core.PerMinute(100), "100/m"},
		{"100/60s", core.PerMinute(100), "100/m"},
		{"  10/s  per-client ", core.Rate{Type: core.PerClient, Permits: 10, Interval: time.Second}, "10/s per-client"},
		{"10/s keepalive=1m", core.Rate{Permits: 10, Interval: time.Second, KeepAlive: time.Minute}, "10/s keepalive=m"},
	} {
		got, err := core.ParseRate(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		text, err := got.MarshalText()
		require.NoError(t, err, c.in)
		want := c.text
		if want == "" {
			want = c.in
		}
		assert.Equal(t, want, string(text), c.in)
		var back core.Rate
		require.NoError(t, back.UnmarshalText(text))
		assert.Equal(t, got, back, "round trip of %q", text)
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, in := range []string{
		"", "10", "/s", "10/", "x/s", "10/x", "0/s", "-1/s", "10/0s", "10/1us", "10/1.5ms",
		"10/s per-server", "10/s keepalive=", "10/s keepalive=1ms", "99999999999/s", "10/-1s",
		"10/99999999999999d", "1e3/s",
		"10/0w", "10/-1w", "10/1.5w", "10/ww", "10/2w3d", "10/99999999999999w", "10/s keepalive=0w",
	} {
		_, err := core.ParseRate(in)
		assert.ErrorIs(t, err, core.ErrInvalidRate, "%q", in)
	}
	_, err := core.Rate{Permits: 0, Interval: time.Second}.MarshalText()
	assert.ErrorIs(t, err, core.ErrInvalidRate)
}

func TestRateInJSON(t *testing.T) {
	var cfg struct {
		Login core.Rate `json:"login"`
		API   core.Rate `json:"api"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"login": "5/m", "api": "1000/h per-client"}`), &cfg))
	assert.Equal(t, core.PerMinute(5), cfg.Login)
	assert.Equal(t, core.Rate{Type: core.PerClient, Permits: 1000, Interval: time.Hour}, cfg.API)
	out, err := json.Marshal(cfg)
	require.NoError(t, err)
	assert.JSONEq(t, `{"login": "5/m", "api": "1000/h per-client"}`, string(out))
	assert.Error(t, json.Unmarshal([]byte(`{"login": "5 per minute"}`), &cfg))
}

func ExampleParseRate() {
	r, err := core.ParseRate("100/m")
	if err != nil {
		panic(err)
	}
	fmt.Println(r)
	r, _ = core.ParseRate("50/10s per-client")
	fmt.Println(r)
	// Output:
	// 100 per 1m0s (Overall)
	// 50 per 10s (PerClient)
}
