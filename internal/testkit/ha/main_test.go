package ha_test

import (
	"testing"

	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
