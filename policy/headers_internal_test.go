package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A quota's RateLimit-Policy item is built once per length of its
// periods, and found again without allocating; past the bound, built
// for each use.
func TestPeriodItemsAreBuiltOnce(t *testing.T) {
	var pi periodItems
	day := 24 * time.Hour
	assert.Equal(t, `"q";q=3;w=86400`, pi.get(`"q";q=3`, day))
	assert.Equal(t, `"q";q=3;w=82800`, pi.get(`"q";q=3`, day-time.Hour))
	assert.Equal(t, `"q";q=3`, pi.get(`"q";q=3`, 0), "no length known: no w")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = pi.get(`"q";q=3`, day) }))
	for i := range 2 * maxPeriodItems {
		pi.get(`"q";q=3`, day+time.Duration(i+1)*time.Second)
	}
	assert.Len(t, *pi.all.Load(), maxPeriodItems)
	assert.Equal(t, `"q";q=3;w=90000`, pi.get(`"q";q=3`, day+time.Hour), "past the bound, built all the same")
}
