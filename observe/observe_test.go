package observe_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlimit/redlimit/observe"
)

func TestOutcomeNames(t *testing.T) {
	seen := map[string]bool{}
	for o := observe.Outcome(0); o.String() != "unknown"; o++ { // every outcome, in order
		s := o.String()
		assert.NotEqual(t, "unknown", s)
		assert.False(t, seen[s], "%q twice", s)
		seen[s] = true
	}
	assert.Len(t, seen, 9)
	assert.Equal(t, "dry_run_denied", observe.DryRunDenied.String())
	assert.Equal(t, "unknown", observe.Outcome(200).String())
}
