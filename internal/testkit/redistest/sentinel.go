package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timings of StartSentinel.
const (
	// SentinelDownAfter: a master that does not answer for this long is
	// down, and the failover starts.
	SentinelDownAfter = time.Second
	// SentinelFailoverTimeout bounds one failover attempt.
	SentinelFailoverTimeout = 5 * time.Second
)

// Sentinel is a master, its replica and the sentinels watching them: one,
// with a quorum of 1, the smallest deployment that fails over by itself
// (StartSentinel), or three with a quorum of 2, as in production
// (StartSentinels).
type Sentinel struct {
	Name      string    // the master name the sentinels monitor
	Master    *Server   // the master at start
	Replica   *Server   // its replica at start
	Sentinel  *Server   // the first sentinel
	Sentinels []*Server // every sentinel
}

// StartSentinel starts a master, a replica of it (diskless sync without
// delay) and a sentinel monitoring the master as "mymaster" with
// down-after-milliseconds SentinelDownAfter and failover-timeout
// SentinelFailoverTimeout, each on a free port, and waits until the
// replica's link is up and the sentinel knows both nodes, so that a
// failover can start at once. About 1 s.
func StartSentinel() (*Sentinel, error) {
	return StartSentinels(1)
}

// StartSentinels is StartSentinel with n sentinels and a quorum of n/2+1.
func StartSentinels(n int) (*Sentinel, error) {
	d := &Sentinel{Name: "mymaster"}
	var err error
	if d.Master, err = Start("--repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	if d.Replica, err = Start("--repl-diskless-sync-delay", "0",
		"--replicaof", "127.0.0.1", strconv.Itoa(d.Master.Port)); err != nil {
		d.Stop()
		return nil, err
	}
	for range n {
		s, err := start(true, nil)
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	d.Sentinel = d.Sentinels[0]
	for _, s := range d.Sentinels {
		for _, cmd := range [][]string{
			{"sentinel", "monitor", d.Name, "127.0.0.1", strconv.Itoa(d.Master.Port), strconv.Itoa(n/2 + 1)},
			{"sentinel", "set", d.Name, "down-after-milliseconds", strconv.Itoa(int(SentinelDownAfter.Milliseconds()))},
			{"sentinel", "set", d.Name, "failover-timeout", strconv.Itoa(int(SentinelFailoverTimeout.Milliseconds()))},
		} {
			if out, err := s.CLI(cmd...); err != nil || !strings.HasPrefix(out, "OK") {
				d.Stop()
				return nil, fmt.Errorf("redistest: %s: %v %s", strings.Join(cmd, " "), err, out)
			}
		}
	}
	if err := d.waitReady(30 * time.Second); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

func (d *Sentinel) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ready := func() (bool, string) {
		info, err := d.Replica.CLI("info", "replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return false, "replica link: " + info
		}
		if addr, err := d.MasterAddr(); err != nil || addr != d.Master.Addr {
			return false, fmt.Sprintf("sentinel master: %s %v", addr, err)
		}
		for _, s := range d.Sentinels {
			// Each sentinel learns of replicas from the master's INFO and
			// must be connected to one to promote it; of the other
			// sentinels from their hello messages, to agree on a failover.
			out, err := s.CLI("sentinel", "replicas", d.Name)
			if err != nil || !strings.Contains(out, strconv.Itoa(d.Replica.Port)) {
				return false, "sentinel replicas: " + out
			}
			if flags := field(out, "flags"); flags != "slave" {
				return false, "sentinel replica flags: " + flags
			}
			out, err = s.CLI("sentinel", "master", d.Name)
			if others := field(out, "num-other-sentinels"); err != nil || others != strconv.Itoa(len(d.Sentinels)-1) {
				return false, "other sentinels known: " + others
			}
		}
		return true, ""
	}
	for {
		ok, why := ready()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: sentinel deployment not ready: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// field returns the value following the line name in redis-cli's output of
// a flat field/value reply.
func field(out, name string) string {
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == name {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// SentinelAddrs returns the addresses of the sentinels, for
// redis.FailoverOptions.SentinelAddrs.
func (d *Sentinel) SentinelAddrs() []string {
	var addrs []string
	for _, s := range d.Sentinels {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// MasterAddr returns the master's address as the sentinel reports it now
// (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (d *Sentinel) MasterAddr() (string, error) {
	out, err := d.Sentinel.CLI("sentinel", "get-master-addr-by-name", d.Name)
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", fmt.Errorf("redistest: sentinel knows no master %q: %s", d.Name, out)
	}
	return f[0] + ":" + f[1], nil
}

// Client returns a go-redis failover client, which finds the master
// through the sentinel and follows failovers; it is closed at the end of t.
func (d *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	rc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.Name, SentinelAddrs: d.SentinelAddrs()})
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("failover client: %v", err)
	}
	return rc
}

// Stop stops the sentinels first, so that they start no failover, then
// the data nodes.
func (d *Sentinel) Stop() {
	for _, s := range append(append([]*Server(nil), d.Sentinels...), d.Replica, d.Master) {
		if s != nil {
			_ = s.Stop()
		}
	}
}
