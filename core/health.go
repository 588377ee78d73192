package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// health tells, for a batcher, a failing Redis from a busy process. A call
// whose deadline comes while it is still queued, never sent, while Redis
// went on answering round trips, fails with ErrOverloaded: this process's
// overload, not Redis's failure (with no answer meanwhile, Redis is what
// it waited for). A round trip that was sent and failed (a network error,
// a timeout past the grace while Redis answered nothing else, or Redis
// refusing to decide: see refusal) means Redis is failing: from then on,
// calls fail at once with ErrUnavailable, but for the probes, which are
// sent: the first call at once (a lone slow answer is no outage), then one
// a second; the first round trip that succeeds ends it.
type health struct {
	suspect atomic.Bool           // a round trip got no answer in its callers' time
	failing atomic.Bool           // the last round trip failed
	since   atomic.Int64          // unix nanos when it began to fail
	probeAt atomic.Int64          // unix nanos from which one call may probe
	failErr atomic.Pointer[error] // what calls fail with meanwhile
	lastOK  atomic.Int64          // unix nanos when one last succeeded
}

// probeEvery is how often a batcher whose Redis is failing sends a call.
const probeEvery = time.Second

// failAfter is how long a round trip of calls without a timeout of their
// own (WithCallTimeout) must wait before its timeout counts as Redis's
// failure; a shorter deadline was the caller's.
const failAfter = 100 * time.Millisecond

// roundTripGrace is how long a round trip may wait for its answer, past its
// callers' deadlines, before Redis counts as failing (if it then answers
// nothing else within a grace either).
const roundTripGrace = time.Second

// admit reports whether a call may go to Redis: always, unless Redis is
// failing; then one call a second, the probe (probe true).
func (h *health) admit() (probe, ok bool) {
	if !h.failing.Load() {
		return false, true
	}
	now := time.Now().UnixNano()
	next := h.probeAt.Load()
	if now < next || !h.probeAt.CompareAndSwap(next, now+int64(probeEvery)) {
		return false, false
	}
	return true, true
}

// report notes the outcome of a round trip of calls sent at start, which
// waited past its callers' deadlines (graced) or not: success ends Redis's
// failing; a failure of Redis starts it, or, from a probe, makes the next
// wait a second. A round trip that got no answer in its callers' time only
// makes the next ones wait longer (on a runner, graced), to tell a failing
// Redis from a busy process; one that got none in that time either counts
// only if Redis answers nothing else (see answers).
func (b *batcher) report(err error, start time.Time, calls []*call, graced bool) {
	now := time.Now()
	switch {
	case err == nil:
		b.lastOK.Store(now.UnixNano())
		if b.suspect.Load() {
			b.suspect.Store(false)
		}
		if b.failing.Load() {
			b.failing.Store(false)
		}
		return
	case errors.Is(err, context.Canceled):
		return // the caller went away
	case errors.Is(err, context.DeadlineExceeded):
		// A timeout is Redis's only when the round trip waited at least as
		// long as one of its calls may: a shorter deadline was a caller's.
		least := time.Duration(0)
		for _, cl := range calls {
			t := cl.l.timeout
			if t <= 0 {
				t = failAfter
			}
			if least == 0 || t < least {
				least = t
			}
		}
		if now.Sub(start) < least {
			return
		}
		if dialErr := b.deadDial(calls[0].l, start); dialErr != nil {
			err = fmt.Errorf("%w: %w", err, dialErr)
			break
		}
		if !graced || !b.failing.Load() && b.answers(start, calls[0].l) {
			b.suspect.Store(true)
			return
		}
	}
	e := unavailable(err)
	if !errors.Is(e, ErrUnavailable) {
		// A timeout that counts: its calls learn that Redis fails too.
		e = fmt.Errorf("%w: %w", ErrUnavailable, err)
		for _, cl := range calls {
			if cl.err != nil && errors.Is(cl.err, context.DeadlineExceeded) {
				cl.err = e
			}
		}
	}
	b.fail(e, start, now)
}

// deadDial returns why a dial to the Redis that serves l failed since
// start, if one did and Redis answered nothing since: a round trip that got
// no answer meanwhile waited for a Redis that refused, or could not be
// reached, not for this process.
func (b *batcher) deadDial(l *Limiter, start time.Time) error {
	if b.lastOK.Load() >= start.UnixNano() {
		return nil
	}
	network, addr := b.c.addrOf(l)
	return b.c.dials.since(network, addr, start)
}

// fail notes that a round trip sent at start failed at now, with e (which
// wraps ErrUnavailable): Redis fails from now on, or a probe failed.
func (b *batcher) fail(e error, start, now time.Time) {
	b.failErr.Store(&e)
	switch {
	case !b.failing.Load():
		b.since.Store(now.UnixNano())
		b.probeAt.Store(now.UnixNano()) // the next call probes at once
		b.failing.Store(true)
	case start.UnixNano() >= b.since.Load():
		b.probeAt.Store(now.Add(probeEvery).UnixNano()) // a probe failed
	}
}

// answers reports whether Redis answered a round trip ended after start,
// or answers a read of l's key now, within roundTripGrace: a round trip
// that waited past its grace may have been this process's, starved of CPU
// (a reply read after its deadline is lost, however soon it came), and not
// Redis's.
func (b *batcher) answers(start time.Time, l *Limiter) bool {
	if b.lastOK.Load() > start.UnixNano() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), roundTripGrace)
	defer cancel()
	return b.c.rdb.Exists(ctx, l.keys[0]).Err() == nil
}

// unavailable returns err wrapped in ErrUnavailable when it says that Redis
// fails, whoever asks: a network error, or a refusal of Redis's own (but a
// timeout, which may be this process's, see report).
func unavailable(err error) error {
	if f := roundTripFailure(err); f != nil && !errors.Is(f, context.DeadlineExceeded) &&
		!errors.Is(f, context.Canceled) && !errors.Is(f, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// roundTripFailure returns err if it is a failure of the round trip as a
// whole, else nil.
func roundTripFailure(err error) error {
	if err == nil {
		return nil
	}
	var reply redis.Error
	if errors.As(err, &reply) && !refusal(reply.Error()) {
		return nil
	}
	return err
}

// refusal reports whether a Redis error reply says that Redis cannot decide
// at all, as opposed to an error of one script call: a read-only replica,
// a server loading its data or without a master, a busy script, missing
// or refused authentication or permission, a Cluster down, a refused write
// (a failed save, too few replicas, or memory full: OOM), or scripting
// disabled.
func refusal(msg string) bool {
	for _, p := range refusals {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

var refusals = []string{"READONLY", "LOADING", "MASTERDOWN", "BUSY", "NOAUTH", "WRONGPASS", "NOPERM",
	"CLUSTERDOWN", "TRYAGAIN", "MISCONF", "NOREPLICAS", "OOM", "ERR unknown command", "ERR Protocol error"}

// deadlineError returns err, made to wrap context.DeadlineExceeded too when
// it is a network timeout at or after ctx's deadline: go-redis with
// ContextTimeoutEnabled reports a deadline as an i/o timeout, and callers
// test for context.DeadlineExceeded whichever way the deadline was met.
func deadlineError(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

// failed notes a round trip that failed with err. On a Redis Cluster, an
// error that is not Redis's reply (a refused connection, a timeout, a
// closed connection) may mean a master was replaced: the Client asks
// go-redis to reload the slot map, which it does at most once at a time.
// go-redis reloads it by itself only on MOVED replies, which a dead master
// never sends, and every ClusterStateReloadInterval (a minute by default):
// without this, the keys of a failed-over master would keep failing for up
// to that long after their replica took over. It returns err.
func (c *Client) failed(err error) error {
	if c.reload != nil && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrOverloaded) &&
		!errors.Is(err, ErrUnavailable) { // failed at once, without a round trip
		var reply redis.Error
		if !errors.As(err, &reply) {
			c.reload(context.Background())
		}
	}
	return err
}

// honoursContext reports whether go-redis stops rdb's I/O at a context's
// deadline (its ContextTimeoutEnabled option).
func honoursContext(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// dials notes, per address, the dials of a go-redis client that failed:
// a round trip that got no answer in time while a dial to its Redis failed
// is Redis failing (refused, unreachable), not this process being busy,
// from the first such call. go-redis dials in the background and retries a
// refused dial for half a second, so a caller sees only its deadline. On a
// single-node or Sentinel client a hook notes the dials; where there is
// none (a Cluster's nodes, which go-redis makes as it goes), the Client
// dials the address itself, at most once per probeDialEvery. One watch
// serves every Client on a go-redis client: it is installed once, and lives
// as long as the go-redis client.
type dials struct {
	failed sync.Map // address -> *dialFailure
}

type dialFailure struct {
	at     atomic.Int64          // unix nanos of the last failed dial
	err    atomic.Pointer[error] // its error
	probed atomic.Int64          // unix nanos of the Client's last own dial
}

// probeDialEvery bounds how often a Client dials an address itself, and
// probeDialTimeout how long it waits for the connection.
const (
	probeDialEvery   = 100 * time.Millisecond
	probeDialTimeout = 50 * time.Millisecond
)

// dialWatches holds the watch of each go-redis client, weakly.
var dialWatches = struct {
	sync.Mutex
	m map[weak.Pointer[redis.Client]]*dials
}{m: map[weak.Pointer[redis.Client]]*dials{}}

// watchDials returns the watch of rdb's dials, installing its hook first on
// a single-node or Sentinel client.
func watchDials(rdb redis.UniversalClient) *dials {
	r, ok := rdb.(*redis.Client)
	if !ok {
		return &dials{}
	}
	dialWatches.Lock()
	defer dialWatches.Unlock()
	key := weak.Make(r)
	if d, ok := dialWatches.m[key]; ok {
		return d
	}
	d := &dials{}
	dialWatches.m[key] = d
	r.AddHook(d)
	runtime.AddCleanup(r, func(key weak.Pointer[redis.Client]) {
		dialWatches.Lock()
		delete(dialWatches.m, key)
		dialWatches.Unlock()
	}, key)
	return d
}

// DialHook notes the dials that fail.
func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && !slowDial(err) {
			d.note(addr, err)
		}
		return conn, err
	}
}

// ProcessHook passes commands on.
func (*dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes pipelines on.
func (*dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *dials) of(addr string) *dialFailure {
	v, _ := d.failed.LoadOrStore(addr, &dialFailure{})
	return v.(*dialFailure)
}

func (d *dials) note(addr string, err error) {
	f := d.of(addr)
	f.err.Store(&err)
	f.at.Store(time.Now().UnixNano())
}

// since returns why a dial to addr (on network) failed after start: a
// failure the hook noted, or, without one, a dial of the Client's own that
// fails other than by timing out; else nil.
func (d *dials) since(network, addr string, start time.Time) error {
	if addr == "" {
		return nil
	}
	f := d.of(addr)
	if f.at.Load() >= start.UnixNano() {
		return *f.err.Load()
	}
	now := time.Now().UnixNano()
	last := f.probed.Load()
	if addr == failoverAddr || now-last < int64(probeDialEvery) || !f.probed.CompareAndSwap(last, now) {
		return nil
	}
	conn, err := net.DialTimeout(network, addr, probeDialTimeout)
	if err == nil {
		_ = conn.Close()
		return nil
	}
	if slowDial(err) {
		return nil
	}
	d.note(addr, err)
	return err
}

// slowDial reports whether a dial failed for want of time (its caller's
// deadline, or no answer in time: a hung server, a busy network or
// process), which tells nothing of Redis, as opposed to a refusal.
func slowDial(err error) bool {
	var ne net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// addrOf returns the network and address of the Redis that serves l's
// keys, as the go-redis client that dials it names them, or "" when it is
// not known without a round trip.
func (c *Client) addrOf(l *Limiter) (network, addr string) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return cmpNetwork(r.Options().Network), r.Options().Addr
	case *redis.ClusterClient:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if n, err := r.MasterForKey(ctx, l.keys[0]); err == nil {
			return cmpNetwork(n.Options().Network), n.Options().Addr
		}
	}
	return "", ""
}

// cmpNetwork returns network, or "tcp", go-redis's default.
func cmpNetwork(network string) string {
	if network == "" {
		return "tcp"
	}
	return network
}
