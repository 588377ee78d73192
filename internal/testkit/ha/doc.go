// Package ha holds the high-availability tests of redlimit: the net/http
// middleware under steady load while Redis fails over, on a Redis Cluster
// (3 masters, 3 replicas; a master is killed) and on a Sentinel deployment
// (1 master, 1 replica, 1 sentinel; the master is killed). They check that
// requests follow the failure policy during the switch, are never held
// much longer than the decision timeout, and that decisions and limiting
// come back through the same go-redis client, and they log the outage and
// recovery times seen by clients. The tests start their own redis-server
// processes (internal/redistest) and skip without redis-server.
package ha
