package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxNameLen is the longest limiter name, key prefix included, in bytes.
const maxNameLen = 4096

// maxClientIDLen bounds a client id given with WithClientID.
const maxClientIDLen = 256

// Client creates limiters on one Redis deployment. It holds no connection of
// its own: every call goes through the go-redis client given to New.
// A Client is safe for concurrent use by multiple goroutines.
type Client struct {
	rdb       redis.UniversalClient
	prefix    string
	clientID  string
	denials   *denialCache  // nil when disabled
	denialCap int           // its capacity, in limiters
	owed      ledger        // what Redis has yet to learn
	batch     *batcher      // the round trips (of each slot: see slots)
	slots     *slotBatchers // Cluster: a batcher per slot
	ctxIO     bool          // rdb stops its I/O at a context's deadline
	// acrossLimiters: the keys of several limiters may share a script call
	// (one server, or a Cluster's batcher per slot; not a Ring's shards, nor
	// a client this package does not know).
	acrossLimiters bool
	reload         func(context.Context) // Cluster: reload the slot map
	dials          *dials                // the dials that failed, per address
	nodes          sync.Map              // address -> *node: the servers' health
	notices        notices               // semaphore waiters' subscriptions
	recent         recent                // the grants to write into a new master
	// offset is Redis's clock less the local clock, in ms, as decisions
	// measure it (see noteClock): Charge turns local times into Redis's
	// with it. rtt is its measure's round trip, and measured when it was
	// taken (local unix ms).
	offset, rtt, measured atomic.Int64
	// hook wraps each round trip (see WithRoundTripHook); nil if none.
	hook func(ctx context.Context, carried []context.Context) (context.Context, func(error))
}

// noteClock notes the Redis time at which a script ran, for a call sent and
// answered at the local times given: Redis's clock less the local clock is
// then within half the round trip of at less the middle of the two. A
// round trip more than twice as long as that of the last measure, taken in
// the last 10 s, tells less and is ignored: a busy process reads its
// replies late, and would take Redis's clock for behind.
func (c *Client) noteClock(at int64, sent, received time.Time) {
	rtt, now := received.Sub(sent).Milliseconds(), received.UnixMilli()
	if rtt > 2*c.rtt.Load()+1 && now-c.measured.Load() < 10_000 {
		return
	}
	c.offset.Store(at - (sent.UnixMilli()+now)/2)
	c.rtt.Store(rtt)
	c.measured.Store(now)
}

// An Option configures a Client.
type Option interface {
	apply(*Client) error
}

type optionFunc func(*Client) error

func (f optionFunc) apply(c *Client) error { return f(c) }

// WithKeyPrefix puts prefix in front of every limiter name, so that
// Limiter("api") uses the Redis key prefix+"api". The default is no prefix,
// so names are the names Redisson clients use. A prefix with a brace must
// hold a whole, non-empty {hash tag} (which puts every limiter of the
// Client in one Redis Cluster slot); one that would make every name invalid
// is an error.
func WithKeyPrefix(prefix string) Option {
	return optionFunc(func(c *Client) error {
		switch {
		case len(prefix) > maxNameLen:
			return fmt.Errorf("%w: key prefix longer than %d bytes", ErrInvalidOption, maxNameLen)
		case strings.ContainsAny(prefix, "{}"):
			if err := checkName(prefix); err != nil {
				return fmt.Errorf("%w: key prefix %q: %w", ErrInvalidOption, prefix, err)
			}
		}
		c.prefix = prefix
		return nil
	})
}

// WithClientID sets the id that separates this Client's budget from others'
// on PerClient limiters (the <id> in "{name}:value:<id>"). The default is a
// random UUID per Client, as Redisson's: a restarted process then starts with
// a fresh budget. A stable id (a host or pod name) keeps it across restarts.
func WithClientID(id string) Option {
	return optionFunc(func(c *Client) error {
		if id == "" || len(id) > maxClientIDLen {
			return fmt.Errorf("%w: client id must be 1 to %d bytes", ErrInvalidOption, maxClientIDLen)
		}
		c.clientID = id
		return nil
	})
}

// WithDenialCache sets how many limiters the local denial cache keeps, the
// least recently used going first (defaultDenialCache, about 380 bytes
// each); 0 turns it off. With it, a request denied by Redis is denied again
// from memory, with no round trip, until the time Redis said it could be
// granted (Result.Cached), for a second at most while Redis answers, and so
// is a request for more permits on the same limiter at the same rate, told
// to retry when every permit is back: an abusive client then costs Redis
// nothing, whatever the permits it asks for. Past that second, a call that
// Redis does not answer (it fails, or answers too late) returns the denial
// still, with its error (see Limiter.TryAcquire), until the permits may be
// back: package policy denies the request then, whatever its failure mode. This Client's Release, Refund,
// Settle, SetRate, UpdateRate and Delete clear the limiter's entry; a
// release, reset or rate change made by another process is seen within a
// second. Turn it off when such changes must apply at once everywhere.
func WithDenialCache(limiters int) Option {
	return optionFunc(func(c *Client) error {
		if limiters < 0 {
			return fmt.Errorf("%w: denial cache of %d limiters", ErrInvalidOption, limiters)
		}
		c.denialCap = limiters
		return nil
	})
}

// WithCoalescing sets how many decision round trips may be in flight at
// once (the default is GOMAXPROCS). A decision that finds fewer makes
// its own round trip at once; decisions that find them all busy wait and
// share the next one, sent as one pipeline, so concurrent callers cost
// Redis far fewer reads, writes and wake-ups. On a Redis Cluster the bound
// is per hash slot, and a pipeline never spans two slots: a master that is
// down or slow holds up no decision on another master's keys (the Client
// keeps a table of 16384 pointers, 128 KiB). 0 turns coalescing off: every
// decision is its own round trip. Turn it off when go-redis reaches Redis
// over an unbuffered connection such as net.Pipe (miniredis's Dial), on
// which a pipeline blocks until its write times out.
func WithCoalescing(maxInFlight int) Option {
	return optionFunc(func(c *Client) error {
		if maxInFlight < 0 {
			return fmt.Errorf("%w: negative round trips in flight", ErrInvalidOption)
		}
		c.batch.max = maxInFlight
		return nil
	})
}

// defaultMaxQueue is the default bound of WithMaxQueue: how many calls may
// wait for a round trip at once (per hash slot on a Redis Cluster).
const defaultMaxQueue = 8192

// WithMaxQueue bounds the calls that wait for a round trip (with
// coalescing: all round trips in flight busy) to n, per Cluster slot on a
// Cluster; beyond it, calls fail at once with an error wrapping
// ErrOverloaded, instead of waiting for a deadline they would miss. The
// default is 8 192.
func WithMaxQueue(n int) Option {
	return optionFunc(func(c *Client) error {
		if n < 1 {
			return fmt.Errorf("%w: max queue %d below 1", ErrInvalidOption, n)
		}
		c.batch.maxQueue = n
		return nil
	})
}

// WithRoundTripHook sets hook to wrap each round trip of the Client's
// calls to Redis, for a tracer: a round trip runs on a context of its own,
// and may carry the calls of many callers (see WithCoalescing). Before the
// round trip, the Client calls hook with its context and the contexts of
// the callers whose calls it carries, in their order (none when it carries
// only what the limiters owe, paid by the Client on its own); hook may keep
// carried. hook returns the context for the round trip's go-redis calls,
// resends included (of a script Redis did not have, or a Cluster's
// TRYAGAIN), which must be ctx or derived from it, and a func that the
// Client calls when the round trip ends, with its failure if it failed as
// a whole (a network error, a timeout, a refusal of Redis's own), else nil.
// Both are called concurrently, on the round trip's goroutine, and must not
// block. The default is no hook. Package
// github.com/redlimit/redlimit/metrics/otel makes a span of each round
// trip, a child of the first caller's span and linked to every caller's.
func WithRoundTripHook(hook func(ctx context.Context, carried []context.Context) (context.Context, func(error))) Option {
	return optionFunc(func(c *Client) error {
		if hook == nil {
			return fmt.Errorf("%w: nil round trip hook", ErrInvalidOption)
		}
		c.hook = hook
		return nil
	})
}

// New returns a Client that keeps its limiters in rdb, which may be a
// single-node, Sentinel (failover) or Cluster client. New does no I/O, so a
// service can start while Redis is down; it only checks its arguments.
//
// Give rdb ContextTimeoutEnabled: true. go-redis then stops its I/O at a
// call's deadline (a context's, or WithCallTimeout's), and a call makes its
// round trip itself. Without it, go-redis waits for its ReadTimeout (3 s
// by default), so the Client makes each round trip that has a deadline on a
// goroutine of its own, and returns at the deadline while that goroutine
// finishes; so it does too, for a while, after a round trip got no answer
// in its caller's time, waiting up to a second more for the answer: one
// late for its caller tells that Redis is well (this process was busy),
// and none, that it fails.
//
// With a Cluster client, a round trip that fails other than with a Redis
// reply (a refused connection, a timeout) makes the Client ask go-redis to
// reload the slot map (ClusterClient.ReloadState), so that the keys of a
// master that failed over follow its promoted replica within moments; by
// itself go-redis would learn of it only at its next periodic reload.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	var across bool
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		across = true
	}
	c := &Client{rdb: rdb, ctxIO: honoursContext(rdb), acrossLimiters: across, denialCap: defaultDenialCache,
		dials: watchDials(rdb)}
	c.owed.c, c.notices.c = c, c
	c.batch = &batcher{c: c, max: runtime.GOMAXPROCS(0), maxQueue: defaultMaxQueue}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	if c.clientID == "" {
		c.clientID = newUUID()
	}
	if c.denialCap > 0 {
		c.denials = newDenialCache(c.denialCap)
	}
	c.batch.node.Store(c.nodeAt(serverAddr(rdb)))
	if addr := serverAddr(rdb); addr == failoverAddr || addr == "cluster" {
		// A master that can change: keep the grants to write into the next.
		c.recent.on = true
		c.dials.register(c)
	}
	c.clusterSetup()
	return c, nil
}

// serverAddr returns the address of rdb's server, as its go-redis client
// names it, for a client of one server; else the kind of client.
func serverAddr(rdb redis.UniversalClient) string {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().Addr
	case *redis.ClusterClient:
		return "cluster"
	case *redis.Ring:
		return "ring"
	}
	return "redis"
}

// Redis returns the go-redis client given to New.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// checkName reports whether the keys of limiter name share a Cluster slot,
// following Redisson's naming: with no '{' in the name the suffixed keys are
// "{name}:value" and so on; with one, "name:value", which needs the name to
// carry a valid hash tag of its own.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidName, maxNameLen)
	}
	open := strings.IndexByte(name, '{')
	if open < 0 {
		if strings.IndexByte(name, '}') >= 0 {
			return fmt.Errorf("%w: a '}' without '{' would split the limiter's keys across cluster slots", ErrInvalidName)
		}
		return nil
	}
	if end := strings.IndexByte(name[open+1:], '}'); end < 1 {
		return fmt.Errorf("%w: a name with '{' needs a non-empty {hash tag}", ErrInvalidName)
	}
	return nil
}

// keysFor returns the name (prefix + name) of a limiter and its five keys,
// in the order every script takes them: config, value, client value,
// permits, client permits. Following Redisson, the suffixed keys are
// "{N}:value" and so on, or "N:value" when N already has a '{'. The keys are
// parts of one string: one allocation.
func (c *Client) keysFor(name string) (string, [5]string) {
	open, end := "{", "}:"
	if strings.IndexByte(c.prefix, '{') >= 0 || strings.IndexByte(name, '{') >= 0 {
		open, end = "", ":"
	}
	id := c.clientID
	s := open + c.prefix + name + end + "value:" + id + open + c.prefix + name + end + "permits:" + id
	n := len(c.prefix) + len(name)
	base := len(open) + n + len(end)
	vlen := base + len("value:") + len(id)
	values, permits := s[:vlen], s[vlen:]
	return values[len(open) : len(open)+n], [5]string{
		values[len(open) : len(open)+n],
		values[:base+len("value")],
		values,
		permits[:base+len("permits")],
		permits,
	}
}

// newUUID returns a random (version 4) UUID in its 36-character form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Check reports whether Redis can decide for the Client, and if not, why:
// a service calls it at start to learn of a mistake in its configuration at
// once, rather than from the failure policy of its first requests. It
// reaches every master (of a Cluster, or the shards of a Ring), checks that
// it is one, and loads the scripts. Its error wraps ErrUnavailable and
// says what to do: Redis unreachable, a password required or refused, a
// permission missing, a read-only replica, Redis loading its data, or
// scripting disabled (naming the command). Check changes nothing: a Client
// works whatever it says, and decides as soon as Redis answers.
func (c *Client) Check(ctx context.Context) error {
	var err error
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		err = rdb.ForEachMaster(ctx, checkNode)
	case *redis.Ring:
		err = rdb.ForEachShard(ctx, checkNode)
	case *redis.Client:
		err = checkNode(ctx, rdb)
	default:
		err = checkScripts(ctx, c.rdb, "redis")
	}
	if err != nil {
		return err
	}
	return nil
}

// checkNode checks one Redis server: that it answers, is a master, and
// takes the scripts.
func checkNode(ctx context.Context, rdb *redis.Client) error {
	addr := "redis at " + rdb.Options().Addr
	if rdb.Options().Addr == failoverAddr {
		addr = "the redis master that Sentinel names"
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return checkError(addr, "PING", err)
	}
	if rdb.Options().Addr == failoverAddr {
		// The master's address, as the server sees this connection.
		if info, err := rdb.Do(ctx, "CLIENT", "INFO").Text(); err == nil {
			if _, laddr, ok := strings.Cut(info, "laddr="); ok {
				addr = "redis at " + strings.Fields(laddr + " ")[0] + " (the master Sentinel names)"
			}
		}
	}
	role, err := rdb.Do(ctx, "ROLE").Slice()
	switch msg := fmt.Sprint(err); {
	case strings.HasPrefix(msg, "ERR unknown command"), strings.HasPrefix(msg, "NOPERM"):
		// A server without ROLE, or a user not allowed it: the role is
		// not known, and the scripts will say if it takes no writes.
	case err != nil:
		return checkError(addr, "ROLE", err)
	case len(role) > 0 && role[0] != "master":
		return fmt.Errorf("%w: %s is a read-only replica (ROLE %v): give the Client its master, or a Sentinel (failover) or Cluster client", ErrUnavailable, addr, role[0])
	}
	return checkScripts(ctx, rdb, addr)
}

// failoverAddr is the address go-redis gives a Sentinel (failover) client's
// options: the master's is known only once Sentinel names it.
const failoverAddr = "FailoverClient"

// checkScripts loads every script.
func checkScripts(ctx context.Context, rdb redis.Scripter, addr string) error {
	for _, s := range scripts {
		if err := rdb.ScriptLoad(ctx, s.src).Err(); err != nil {
			return checkError(addr, "SCRIPT LOAD", err)
		}
	}
	return nil
}

// checkError says what err, the answer of addr to command, means.
func checkError(addr, command string, err error) error {
	msg := err.Error()
	var reply redis.Error
	switch {
	case !errors.As(err, &reply):
		return fmt.Errorf("%w: %s is unreachable: %w", ErrUnavailable, addr, err)
	case strings.HasPrefix(msg, "NOAUTH"), strings.Contains(msg, "Protocol error: unauthenticated"):
		return fmt.Errorf("%w: %s requires a password: set Password (and Username) in the go-redis options: %w", ErrUnavailable, addr, err)
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("%w: %s refused the username or password: %w", ErrUnavailable, addr, err)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("%w: %s does not let this user run %s: grant it (the Client needs PING, SCRIPT, EVALSHA and EVAL): %w", ErrUnavailable, addr, command, err)
	case strings.HasPrefix(msg, "ERR unknown command"):
		return fmt.Errorf("%w: %s has %s disabled (renamed or removed): the Client needs scripting (SCRIPT, EVALSHA and EVAL): %w", ErrUnavailable, addr, command, err)
	case strings.HasPrefix(msg, "LOADING"):
		return fmt.Errorf("%w: %s is loading its data: %w", ErrUnavailable, addr, err)
	}
	return fmt.Errorf("%w: %s answered %s with: %w", ErrUnavailable, addr, command, err)
}
