package slot_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestOf compares Of with CLUSTER KEYSLOT on a cluster-enabled node.
func TestOf(t *testing.T) {
	redistest.Need(t)
	s, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	rdb := s.Client(t)
	keys := []string{"", "a", "foo", "123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "{}x", "x{", "x}y{", "ha:open:u0", "\xff\x00{\x80}"}
	for i := range 200 {
		keys = append(keys, "k"+strconv.Itoa(i*7919))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(context.Background(), k).Result()
		require.NoError(t, err)
		require.Equal(t, int(want), slot.Of(k), "slot of %q", k)
	}
}
