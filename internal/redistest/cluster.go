package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of child processes.
type Cluster struct {
	Masters  []*Server // in the order given to redis-cli --cluster create
	Replicas []*Server
}

var (
	sharedCluster *Cluster
	errCluster    error
	clusterOnce   sync.Once
)

// SharedCluster returns one cluster of 3 masters for the whole test binary,
// started on first use (about 3 s).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	Need(t)
	clusterOnce.Do(func() { sharedCluster, errCluster = StartCluster(3, 0) })
	if errCluster != nil {
		t.Fatalf("start redis cluster: %v", errCluster)
	}
	return sharedCluster
}

// StartCluster starts masters nodes with replicas replicas each, creates the
// cluster with redis-cli and waits until every node reports cluster_state:ok
// and every replica is linked to its master.
func StartCluster(masters, replicas int) (*Cluster, error) {
	n := masters * (1 + replicas)
	nodes := make([]*Server, 0, n)
	for i := 0; i < n; i++ {
		s, err := Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0",
			"--cluster-require-full-coverage", "no")
		if err != nil {
			for _, s := range nodes {
				_ = s.Stop()
			}
			return nil, err
		}
		nodes = append(nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := cli(nodes[0].Port, args...); err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	c := &Cluster{Masters: nodes[:masters], Replicas: nodes[masters:]}
	if err := c.waitReady(60 * time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, s := range c.All() {
		for {
			info, err := s.CLI("cluster", "info")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redistest: node %s not ready: %s", s.Addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range c.Replicas {
		for {
			info, err := s.CLI("info", "replication")
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redistest: replica %s not linked: %s", s.Addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// All returns every node.
func (c *Cluster) All() []*Server {
	return append(append([]*Server(nil), c.Masters...), c.Replicas...)
}

// Addrs returns the address of every node.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.All() {
		a = append(a, s.Addr)
	}
	return a
}

// Client returns a go-redis cluster client, closed at the end of t.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	return rc
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.All() {
		_ = s.Stop()
	}
}
