package core

import "time"

// DecisionTime returns the Redis server time at which r was decided.
func DecisionTime(r Result) time.Time { return time.UnixMilli(r.at) }

// Keys returns the five Redis keys of l, in script order.
func Keys(l *Limiter) []string { return append([]string(nil), l.keys[:]...) }

// CachedDenials returns the number of entries in c's denial cache.
func CachedDenials(c *Client) int64 {
	if c.denials == nil {
		return 0
	}
	return c.denials.n.Load()
}
