package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// Cluster is a Redis Cluster of child processes.
type Cluster struct {
	Masters  []*Server // in the order given to redis-cli --cluster create
	Replicas []*Server
}

// onceCluster is a cluster started at most once per test binary.
type onceCluster struct {
	what  string
	start func() (*Cluster, error)
	once  sync.Once
	c     *Cluster
	err   error
}

// startOnce starts the cluster unless it was started already.
func (o *onceCluster) startOnce() { o.once.Do(func() { o.c, o.err = o.start() }) }

// get returns the cluster, started on first use; it skips without
// redis-server (see Need).
func (o *onceCluster) get(t testing.TB) *Cluster {
	t.Helper()
	Need(t)
	o.startOnce()
	if o.err != nil {
		t.Fatalf("start %s: %v", o.what, o.err)
	}
	return o.c
}

var (
	sharedCluster     = &onceCluster{what: "redis cluster", start: func() (*Cluster, error) { return StartCluster(3, 0) }}
	replicatedCluster = &onceCluster{what: "redis cluster with replicas", start: func() (*Cluster, error) { return StartCluster(3, 1) }}
	outageCluster     = &onceCluster{what: "redis cluster for outages", start: func() (*Cluster, error) {
		return StartClusterArgs(3, 0, "--cluster-node-timeout", strconv.Itoa(int(OutageNodeTimeout.Milliseconds())))
	}}
)

// SharedCluster returns one cluster of 3 masters for the whole test binary,
// started on first use (about 3 s).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	return sharedCluster.get(t)
}

// StartCluster starts masters nodes with replicas replicas each, creates the
// cluster with redis-cli and waits until every node reports cluster_state:ok
// and every replica is linked to its master.
func StartCluster(masters, replicas int) (*Cluster, error) {
	return startCluster(masters, replicas, nil)
}

func startCluster(masters, replicas int, extra []string) (*Cluster, error) {
	n := masters * (1 + replicas)
	nodes := make([]*Server, 0, n)
	for i := 0; i < n; i++ {
		s, err := Start(append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0",
			"--cluster-require-full-coverage", "no"}, extra...)...)
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
	c := &Cluster{Masters: nodes[:masters], Replicas: nodes[masters:]}
	if out, err := cli(nodes[0].Port, args...); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	if err := c.waitReady(60 * time.Second); err != nil {
		c.Stop()
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
	return c.ClientWith(t, &redis.ClusterOptions{})
}

// ClientWith returns a go-redis cluster client with options o (Addrs
// defaults to every node), closed at the end of t. It has pinged every
// master and run a command on a key, which makes go-redis load its slot
// map and its command table (COMMAND, tens of milliseconds under the race
// detector): a test's first decision does not pay for them.
func (c *Cluster) ClientWith(t testing.TB, o *redis.ClusterOptions) *redis.ClusterClient {
	t.Helper()
	if len(o.Addrs) == 0 {
		o.Addrs = c.Addrs()
	}
	rc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	if err := rc.Exists(ctx, "redistest:warm-up").Err(); err != nil {
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

// SharedClusterWithReplicas returns one cluster of 3 masters with a replica
// each for the whole test binary, started on first use (about 3 to 5 s).
// Tests sharing it must use their own key names and must not stop its
// nodes: for outages, use SharedOutageCluster or a cluster of their own.
func SharedClusterWithReplicas(t testing.TB) *Cluster {
	t.Helper()
	return replicatedCluster.get(t)
}

// OutageNodeTimeout is the cluster-node-timeout of SharedOutageCluster.
const OutageNodeTimeout = time.Minute

// SharedOutageCluster returns one cluster of 3 masters without replicas for
// the whole test binary, started on first use, for tests that stop a master
// to take its slots down. Its node timeout is a minute, so within a test no
// node marks a stopped master as failed: the other masters keep serving
// their slots however many masters are down (no minority partition), and a
// master restarted with RestartNode takes its slots back as soon as Redis
// lets a rebooted master accept writes (about 2 s). Each test must own the
// master it stops (for instance by index), and must not assume its master
// is running: call RestartNode first when it is not.
func SharedOutageCluster(t testing.TB) *Cluster {
	t.Helper()
	return outageCluster.get(t)
}

// PrestartOutageCluster starts SharedOutageCluster in the background, if
// it is not started yet, so that it is ready sooner when a test asks for
// it; it returns at once. Call it after Need.
func PrestartOutageCluster() {
	go outageCluster.startOnce()
}

// StartClusterArgs is StartCluster with extra redis-server arguments for
// every node, given after the harness's own, which they override (e.g.
// "--cluster-node-timeout", "5000").
func StartClusterArgs(masters, replicas int, args ...string) (*Cluster, error) {
	return startCluster(masters, replicas, args)
}

// Server returns the node listening on addr, or nil.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range c.All() {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// MasterOf returns the node that the cluster, as seen by the first running
// node that answers, lists as the master of slot. Right after a master
// stops, that is still the stopped master, until a replica is promoted.
func (c *Cluster) MasterOf(slot int) (*Server, error) {
	owners, err := c.Owners()
	if err != nil {
		return nil, err
	}
	if owners[slot] == nil {
		return nil, fmt.Errorf("redistest: slot %d not served", slot)
	}
	return owners[slot], nil
}

// Owners returns the master of every slot (nil for a slot no node serves),
// as CLUSTER SHARDS on the first running node that answers reports it.
func (c *Cluster) Owners() ([]*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var lastErr error
	for _, s := range c.All() {
		if !s.Running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
		shards, err := rc.ClusterShards(ctx).Result()
		_ = rc.Close()
		if err != nil {
			lastErr = err
			continue
		}
		owners := make([]*Server, slot.Count)
		for _, sh := range shards {
			var m *Server
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					m = c.Server(net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
				}
			}
			if m == nil {
				if len(sh.Slots) == 0 {
					continue
				}
				return nil, fmt.Errorf("redistest: slots %d-%d served by no known master", sh.Slots[0].Start, sh.Slots[0].End)
			}
			for _, r := range sh.Slots {
				for i := r.Start; i <= r.End && i < slot.Count; i++ {
					owners[i] = m
				}
			}
		}
		return owners, nil
	}
	return nil, fmt.Errorf("redistest: no node answered CLUSTER SHARDS: %v", lastErr)
}

// Role returns the role of a running node as it reports it: "master" or
// "slave" (the first word of ROLE).
func (s *Server) Role() (string, error) {
	out, err := s.CLI("role")
	if err != nil {
		return "", err
	}
	role, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(role), nil
}

// RestartNode starts a stopped node again on its port with its cluster
// config (same node id, same slots; the data is gone) and waits until it
// reports cluster_state:ok, that is until it serves its slots again, if the
// cluster still gives them to it. In a cluster with replicas, a master that
// was replaced while down comes back as a replica of its replacement.
func (c *Cluster) RestartNode(s *Server) error {
	if err := s.Restart(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.CLI("cluster", "info")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: restarted node %s not ready: %s", s.Addr, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Reshard moves n hash slots from master from to master to, live, as an
// operator does: redis-cli --cluster reshard, which marks each slot
// migrating and importing, moves its keys with MIGRATE, ten at a time, and
// hands the slot over. It returns when every slot has moved.
func (c *Cluster) Reshard(from, to *Server, n int) error {
	id := func(s *Server) (string, error) {
		out, err := s.CLI("cluster", "myid")
		return strings.TrimSpace(out), err
	}
	fromID, err := id(from)
	if err != nil {
		return err
	}
	toID, err := id(to)
	if err != nil {
		return err
	}
	out, err := cli(from.Port, "--cluster", "reshard", from.Addr, "--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes", "--cluster-pipeline", "10")
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}
