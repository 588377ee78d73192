package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// backend is the Redis deployment the table runs against.
type backend struct {
	// rdb is the Redis shared by the cases that do not stop it; each case
	// isolates its limiters with a key prefix of its own.
	rdb redis.UniversalClient
	// keys returns every key in rdb.
	keys func(ctx context.Context) ([]string, error)
	// failing returns a Redis that a failure case may stop and restart,
	// the key prefix the case must use on it, and how to stop and restart
	// it. n (0, 1, 2) numbers the failure cases: no two cases running at
	// once pass the same n.
	failing func(t *testing.T, n int) (rdb redis.UniversalClient, prefix string, o outage)
}

// outage is the Redis of a failure case, which the case stops and starts
// again. Restart returns once Redis serves the case's keys again (empty).
type outage interface {
	Stop() error
	Restart() error
}

// standalone runs the table on redistest.Shared, and each failure case on
// a redis-server of its own.
func standalone(t *testing.T) backend {
	rdb := redistest.Shared(t).Client(t)
	return backend{
		rdb:  rdb,
		keys: func(ctx context.Context) ([]string, error) { return rdb.Keys(ctx, "*").Result() },
		failing: func(t *testing.T, _ int) (redis.UniversalClient, string, outage) {
			s, err := redistest.Start()
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Stop() })
			return s.Client(t), "", s
		},
	}
}

// RunCluster runs the whole table for a against Redis Clusters.
//
// Most cases share redistest.SharedClusterWithReplicas (3 masters with a
// replica each), through one go-redis ClusterClient; the key scan reads
// every master. The failure cases ("Redis stopped") stop the master that
// serves their keys, in redistest.SharedOutageCluster (3 masters, no
// replicas, one per failure case: each case's key prefix has a hash tag
// on its master), and restart it: with no replica to promote and a node
// timeout longer than any test, the outage lasts exactly until the restart,
// the other masters keep serving, and the stopped master takes its slots
// back once restarted. Replica promotion under load is tested in
// internal/ha, not here: in a table case it would end the outage at a
// time the case does not choose.
func RunCluster(t *testing.T, a Adapter) {
	redistest.Need(t)
	redistest.PrestartOutageCluster() // while the other one starts
	c := redistest.SharedClusterWithReplicas(t)
	rc := c.Client(t)
	run(t, a, backend{
		rdb:  rc,
		keys: func(ctx context.Context) ([]string, error) { return scanMasters(ctx, rc) },
		failing: func(t *testing.T, n int) (redis.UniversalClient, string, outage) {
			oc := redistest.SharedOutageCluster(t)
			m := oc.Masters[n]
			if !m.Running() { // stopped by an earlier run of the case
				require.NoError(t, oc.RestartNode(m))
			}
			// Leave the master running for the other cases and later runs.
			t.Cleanup(func() {
				if !m.Running() {
					_ = oc.RestartNode(m)
				}
			})
			tag, err := hashTagOn(oc, m)
			require.NoError(t, err)
			// Not Cluster.Client, which pings every master: another failure
			// case may have stopped its own.
			frc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr}})
			t.Cleanup(func() { _ = frc.Close() })
			// Load the slot map and the command table and connect to the
			// master now, as Cluster.Client does, not in the case's first
			// decision, which has 100 ms.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, frc.Exists(ctx, "{"+tag+"}:warm-up").Err())
			prefix := "{" + tag + "}" + t.Name() + "." + strconv.FormatUint(rand.Uint64(), 36) + ":"
			return frc, prefix, clusterOutage{oc, m}
		},
	})
}

// scanMasters returns every key of every master of the cluster, with SCAN.
func scanMasters(ctx context.Context, rc *redis.ClusterClient) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		var ks []string
		it := m.Scan(ctx, 0, "*", 1000).Iterator()
		for it.Next(ctx) {
			ks = append(ks, it.Val())
		}
		if err := it.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return nil
	})
	return keys, err
}

// hashTagOn returns a hash tag whose slot master m serves.
func hashTagOn(c *redistest.Cluster, m *redistest.Server) (string, error) {
	owners, err := c.Owners()
	if err != nil {
		return "", err
	}
	for i := range 100_000 {
		tag := "m" + strconv.Itoa(i)
		if owners[slot.Of(tag)] == m {
			return tag, nil
		}
	}
	return "", fmt.Errorf("conformance: master %s serves no slot", m.Addr)
}

// clusterOutage stops and restarts one master of a cluster.
type clusterOutage struct {
	c *redistest.Cluster
	m *redistest.Server
}

func (o clusterOutage) Stop() error    { return o.m.Stop() }
func (o clusterOutage) Restart() error { return o.c.RestartNode(o.m) }
