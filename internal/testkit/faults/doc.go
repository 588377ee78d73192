// Package faults holds the reliability tests of the middleware under
// Redis faults, run with real redis-server processes and, where a network
// fault is needed, the test proxy of package faultproxy: Redis killed and
// restarted, Redis slower than the decision timeout, a reply lost after
// Redis ran the script, the script cache or the data flushed, keys
// evicted. The package has no code of its own: everything is in its tests.
package faults
