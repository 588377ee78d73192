package core_test

import (
	"os"
	"testing"

	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// TestMain runs the tests, or, when the test binary was started by
// TestDistributed as one of its worker processes, that worker alone.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(distWorkerEnv); ok {
		os.Exit(runDistWorker(spec))
	}
	redistest.Main(m)
}
