package ha_test

import (
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
