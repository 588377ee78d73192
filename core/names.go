package core

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Names returns the names (without the Client's key prefix) of the
// limiters, quotas and semaphores that begin with prefix and have keys in
// Redis, each once, read with SCAN from every master of a Cluster (every
// shard of a Ring); a name created or removed meanwhile may or may not be
// listed. Iteration stops at the first error, which it yields. Its work
// grows with the number of keys in Redis that begin with the Client's key
// prefix and prefix: an operator's tool, not a request's.
//
// With a key prefix or a name that holds '{', whose keys are "N:value"
// and the like, a name ending in one of the suffixes the keys add
// (":value", ":permits", ":quota", ":timeout") is listed without it.
func (c *Client) Names(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		names, err := c.scanNames(ctx, c.prefix+prefix)
		if err != nil {
			yield("", fmt.Errorf("core: names: %w", err))
			return
		}
		for _, n := range names {
			if !yield(n[len(c.prefix):], nil) {
				return
			}
		}
	}
}

// scanNames returns the names, key prefix included, with keys that begin
// with p.
func (c *Client) scanNames(ctx context.Context, p string) ([]string, error) {
	patterns := []string{globEscape(p) + "*"}
	if strings.IndexByte(p, '{') < 0 {
		// The keys of the names without '{': "{N}:value" and the like.
		patterns = append(patterns, "{"+globEscape(p)+"*")
	}
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		names []string
	)
	scan := func(ctx context.Context, rdb redis.Cmdable) error {
		for _, pattern := range patterns {
			it := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				n, ok := nameOfKey(it.Val(), p)
				if !ok {
					continue
				}
				mu.Lock()
				if !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
				mu.Unlock()
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		err = rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	case *redis.Ring:
		err = rdb.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return scan(ctx, s) })
	default:
		err = scan(ctx, c.rdb)
	}
	return names, err
}

// keySuffixes are what a name's keys add to it (see keysFor, quotaKey and
// Semaphore), the longest first.
var keySuffixes = []string{":permits:", ":value:", ":permits", ":value", ":quota", ":timeout"}

// nameOfKey returns the name, beginning with p, whose key k is, and
// whether k is one.
func nameOfKey(k, p string) (string, bool) {
	if strings.HasPrefix(k, "{") && !strings.HasPrefix(p, "{") {
		// "{N}:suffix": the name is the hash tag.
		end := strings.Index(k, "}:")
		if end < 0 {
			return "", false
		}
		k = k[1:end]
		return k, strings.HasPrefix(k, p)
	}
	if !strings.HasPrefix(k, p) {
		return "", false
	}
	if strings.IndexByte(k, '{') < 0 {
		return k, true // a config hash or a semaphore's counter: the name itself
	}
	for _, s := range keySuffixes {
		if i := strings.LastIndex(k, s); i >= len(p) && (strings.HasSuffix(s, ":") || i+len(s) == len(k)) {
			return k[:i], true
		}
	}
	return k, true
}

// globEscape escapes the characters of s that a SCAN pattern reads.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
