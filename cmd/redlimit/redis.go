package main

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redisurl"
)

// connect returns the client of c's Redis URL, which it parses; it does no
// I/O. An error says what is wrong with the URL without its password.
func (c *config) connect() (redis.UniversalClient, error) {
	if c.cluster {
		o, err := redis.ParseClusterURL(c.redisURL)
		if err != nil {
			return nil, usagef("-redis: %w", redisurl.RedactCluster(err, c.redisURL))
		}
		c.secret, c.addr = o.Password, strings.Join(o.Addrs, ", ")
		o.ContextTimeoutEnabled, o.DialTimeout = true, c.dialTimeout(o.DialTimeout)
		o.MaxRetries, o.DialerRetries = retries(o.MaxRetries), 1
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return nil, usagef("-redis: %w", redisurl.Redact(err, c.redisURL))
	}
	c.secret, c.addr = o.Password, o.Addr
	o.ContextTimeoutEnabled, o.DialTimeout = true, c.dialTimeout(o.DialTimeout)
	o.MaxRetries, o.DialerRetries = retries(o.MaxRetries), 1
	return redis.NewClient(o), nil
}

// retries returns the retries of a command, n in the URL (max_retries), or
// none: an operator runs the command again, and a Redis that refuses
// connections is told at once, not after go-redis's retries and their
// back-off. A refused dial is not retried either.
func retries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// dialTimeout returns the URL's dial timeout d (0: go-redis's 5 s), at
// most -timeout.
func (c *config) dialTimeout(d time.Duration) time.Duration {
	if d == 0 {
		d = 5 * time.Second
	}
	return min(d, c.timeout)
}

// redact returns msg without the URL's password, as it is and as a URL
// writes it: no message of Redis's or go-redis's is known to hold it, and
// this makes sure.
func (c *config) redact(msg string) string {
	if c.secret == "" {
		return msg
	}
	for _, s := range []string{c.secret, url.QueryEscape(c.secret), url.PathEscape(c.secret)} {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

// quiet is go-redis's logger for the command, which logs nothing: the
// errors it logs (a dial that failed) are the command's errors, said once.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
