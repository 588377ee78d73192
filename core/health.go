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

// A node is a Redis server as the Client sees it, by the address its
// go-redis client dials ("FailoverClient" for a Sentinel client's master):
// the health that the batchers of its hash slots share (on a Cluster,
// those of the slots it serves), so that its failure fails their calls at
// once from the first failing call, whatever the slot.
//
// A node tells a failing Redis from a busy process. A call whose deadline
// comes while it is still queued, never sent, while Redis went on
// answering round trips, fails with ErrOverloaded: this process's
// overload, not Redis's failure (with no answer meanwhile, Redis is what
// it waited for). A round trip that was sent and failed (a network error,
// a refused dial, a timeout past the grace while Redis answered nothing
// else, or Redis refusing to decide: see refusal) means Redis is failing:
// an Outage begins, calls fail at once with an error wrapping
// ErrUnavailable and the Outage, and the Client probes the server once a
// second, on its own, until it answers, which ends the Outage.
type node struct {
	c       *Client
	addr    string
	suspect atomic.Bool            // a round trip got no answer in its callers' time
	failing atomic.Bool            // an Outage is on
	since   atomic.Int64           // unix nanos when it began
	failErr atomic.Pointer[error]  // what calls fail with meanwhile
	outage  atomic.Pointer[Outage] // while failing
	lastOK  atomic.Int64           // unix nanos when a round trip last succeeded
	mu      sync.Mutex             // one Outage at a time
}

// An Outage is a time in which a Redis server fails: a master of a Redis
// Cluster, a Sentinel client's master, or the one server of a single-node
// client. The calls that it cannot decide fail with an error that wraps
// ErrUnavailable and the Outage (errors.As): calls on its keys fail at once
// while it lasts, and the Client probes the server once a second; the
// Outage ends, and Done is closed, when the server answers. The calls on
// other servers' keys are not affected.
type Outage struct {
	// Addr is the server's address, as its go-redis client names it:
	// "FailoverClient" for the master of a Sentinel client.
	Addr string
	done chan struct{}
}

// Error says which server fails.
func (o *Outage) Error() string { return "redis at " + o.Addr + " fails" }

// Done returns a channel that is closed when the Outage ends: the server
// answered the Client again.
func (o *Outage) Done() <-chan struct{} { return o.done }

// probeEvery is how often the Client probes a failing server.
const probeEvery = time.Second

// failAfter is how long a round trip of calls without a timeout of their
// own (WithCallTimeout) must wait before its timeout counts as Redis's
// failure; a shorter deadline was the caller's.
const failAfter = 100 * time.Millisecond

// roundTripGrace is how long a round trip may wait for its answer, past its
// callers' deadlines, before Redis counts as failing (if it then answers
// nothing else within a grace either).
const roundTripGrace = time.Second

// nodeAt returns the node of addr.
func (c *Client) nodeAt(addr string) *node {
	if v, ok := c.nodes.Load(addr); ok {
		return v.(*node)
	}
	v, _ := c.nodes.LoadOrStore(addr, &node{c: c, addr: addr})
	return v.(*node)
}

// admit returns nil when a call may go to Redis, or, while the node fails,
// the error it fails with at once.
func (n *node) admit() error {
	if !n.failing.Load() {
		return nil
	}
	return *n.failErr.Load()
}

// report notes the outcome of a round trip of calls sent at start, which
// waited past its callers' deadlines (graced) or not: success ends Redis's
// failing (if it was sent after it began); a failure of Redis starts it.
// A round trip that got no answer in its callers' time, but for a refused
// dial (see deadDial), only makes the next ones wait longer (on a runner,
// graced), to tell a failing Redis from a busy process; one that got none
// in that time either counts only if Redis answers nothing else (see
// silence). A call that failed with Redis gets the Outage's error.
func (b *batcher) report(err error, start time.Time, calls []*call, graced bool) {
	n := b.node.Load()
	now := time.Now()
	switch {
	case err == nil:
		n.lastOK.Store(now.UnixNano())
		if n.suspect.Load() {
			n.suspect.Store(false)
		}
		if n.failing.Load() && start.UnixNano() >= n.since.Load() {
			n.recover()
		}
		b.follow(calls[0].l)
		return
	case errors.Is(err, context.Canceled), errors.Is(err, redis.ErrClosed):
		return // the caller went away, or the go-redis client was closed
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
		if !graced {
			n.suspect.Store(true)
			return
		}
		if !n.failing.Load() {
			silence := b.silence(start, calls[0].l)
			if silence == nil {
				n.suspect.Store(true)
				return
			}
			err = fmt.Errorf("%w, and %w", err, silence)
		}
	}
	e := n.fail(err, calls[0].l, now)
	for _, cl := range calls {
		if cl.err != nil && (errors.Is(cl.err, ErrUnavailable) || errors.Is(cl.err, context.DeadlineExceeded)) {
			cl.err = e
		}
	}
}

// deadDial returns why a dial to the Redis that serves l failed since
// start, if one did and Redis answered nothing since: a round trip that got
// no answer meanwhile waited for a Redis that refused, or could not be
// reached, not for this process.
func (b *batcher) deadDial(l *Limiter, start time.Time) error {
	if b.node.Load().lastOK.Load() >= start.UnixNano() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeDialTimeout)
	defer cancel()
	network, addr := b.c.addrOf(ctx, l)
	return b.c.dials.since(network, addr, start)
}

// fail notes that a round trip on l's keys failed with err at now: an
// Outage begins, unless one is on, and the Client probes the server on l's
// keys until it answers. It returns the error the failed calls get: err
// wrapped in ErrUnavailable and the Outage.
func (n *node) fail(err error, l *Limiter, now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failing.Load() {
		return *n.failErr.Load()
	}
	o := &Outage{Addr: n.addr, done: make(chan struct{})}
	e := fmt.Errorf("%w: %w: %w", ErrUnavailable, o, err)
	n.failErr.Store(&e)
	n.outage.Store(o)
	n.since.Store(now.UnixNano())
	n.failing.Store(true)
	go n.probe(l.keys[0], o)
	return e
}

// recover ends the node's Outage.
func (n *node) recover() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failing.CompareAndSwap(true, false) {
		close(n.outage.Swap(nil).done)
	}
}

// probe reads key, on the server that serves it, once a second, until it
// answers, the go-redis client is closed, or o has ended; then it ends o. On a Cluster, the key's slot
// leads to the replica promoted in the failed master's place once go-redis
// knows of it (each failed probe asks it to reload the slot map).
func (n *node) probe(key string, o *Outage) {
	for {
		select {
		case <-o.done:
			return
		case <-time.After(probeEvery):
		}
		ctx, cancel := context.WithTimeout(context.Background(), roundTripGrace)
		err := n.c.failed(n.c.rdb.Exists(ctx, key).Err())
		cancel()
		switch {
		case err == nil:
			n.lastOK.Store(time.Now().UnixNano())
			n.recover()
			return
		case errors.Is(err, redis.ErrClosed):
			// The go-redis client was closed: nothing is decided any
			// more; the Outage ends with it, for whoever waits on it.
			n.recover()
			return
		}
	}
}

// silence returns nil when Redis answered a round trip ended after start,
// or answers a PING on a connection of its own now, within roundTripGrace;
// else why Redis is taken for failing. A round trip that waited past its
// grace may have been this process's, starved of CPU or waiting for a
// connection of the go-redis pool, and not Redis's. The PING waits in no
// pool, and a reply that came in time counts however late this process
// reads it; an error reply counts too (a server that wants AUTH answers
// all the same). Where the go-redis client has no server of its own to
// dial (a Ring), a read of l's key stands in.
func (b *batcher) silence(start time.Time, l *Limiter) error {
	n := b.node.Load()
	if n.lastOK.Load() > start.UnixNano() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), roundTripGrace)
	defer cancel()
	var err error
	if dial := b.c.dialerOf(ctx, l); dial != nil {
		err = pings(ctx, dial)
	} else if err = b.c.rdb.Exists(ctx, l.keys[0]).Err(); err != nil {
		err = fmt.Errorf("a read of %q: %w", l.keys[0], err)
	}
	if n.lastOK.Load() > start.UnixNano() {
		return nil
	}
	return err
}

// pings returns nil when the server that dial reaches answers a PING on a
// new connection within roundTripGrace of sending it, or when this process
// cannot tell; else why the server is taken for failing. A dial or a read
// that timed out tells nothing when this process was starved: when this
// goroutine woke well after its deadline, or, for a dial, when the
// goroutines that the network poller readies ran late while it dialed
// (see lagWatch). A server that does not read still has its connections
// accepted.
func pings(ctx context.Context, dial func(context.Context) (net.Conn, error)) error {
	watch := watchLag()
	conn, err := dial(ctx)
	lag := watch.stop()
	if err != nil {
		dl, ok := ctx.Deadline()
		if slowDial(err) && (lag > lateWake || ok && time.Since(dl) > lateWake) {
			return nil
		}
		return fmt.Errorf("a dial for a PING: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return fmt.Errorf("a PING: %w", err)
	}
	deadline := time.Now().Add(roundTripGrace)
	_ = conn.SetReadDeadline(deadline)
	var buf [64]byte
	n, err := conn.Read(buf[:])
	switch {
	case n > 0:
		return nil
	case !timedOut(err):
		return fmt.Errorf("a PING: %w", err)
	}
	// The deadline woke this goroutine; a reply that came before it may
	// wait in the socket still, unread: read it (a goroutine starved
	// between setting a deadline and reading finds it passed, so the
	// second waits as long as a late wake may be).
	late := time.Since(deadline) > lateWake
	again := time.Now().Add(lateWake)
	_ = conn.SetReadDeadline(again)
	n, err = conn.Read(buf[:])
	switch {
	case n > 0:
		return nil
	case !timedOut(err):
		return fmt.Errorf("a PING: %w", err)
	case late || time.Since(again) > lateWake:
		return nil // this goroutine woke late: this process was starved
	}
	return fmt.Errorf("no answer to a PING on a new connection within %v", roundTripGrace)
}

// A lagWatch measures how late this process runs the goroutines that its
// network poller readies, while it runs: a timer sends a datagram to a
// socket of its own lagEvery after the previous one was read, and a
// goroutine notes how long each took to be read. In a process with more
// runnable goroutines than it can run, such a goroutine waits behind them
// all, while one that a timer wakes runs at once: a dial then times out at
// its context's deadline although its connection was made, or was never
// tried, its goroutine not run in time.
type lagWatch struct {
	c       *net.UDPConn // nil: no socket to tell by
	sent    atomic.Int64 // unix nanos when the datagram not read yet was sent; 0: none
	worst   atomic.Int64 // the longest wait for a datagram, in ns
	stopped atomic.Bool
}

// lagEvery is how long after reading a datagram a lagWatch sends the next.
const lagEvery = 10 * time.Millisecond

// watchLag starts a lagWatch.
func watchLag() *lagWatch {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return &lagWatch{}
	}
	w := &lagWatch{c: c}
	go w.read()
	return w
}

// read reads the datagrams until the watch stops, then closes the socket.
// Each is sent by a timer once the previous one was read, so that the
// reader waits for it in the network poller (one sent before it would be
// found there at once).
func (w *lagWatch) read() {
	defer w.c.Close()
	var b [1]byte
	for !w.stopped.Load() {
		send := time.AfterFunc(lagEvery, func() {
			w.sent.Store(time.Now().UnixNano())
			_, _ = w.c.WriteTo(nil, w.c.LocalAddr())
		})
		_, _, err := w.c.ReadFrom(b[:])
		send.Stop()
		if err != nil {
			return
		}
		if sent := w.sent.Swap(0); sent != 0 {
			w.worst.Store(max(w.worst.Load(), time.Now().UnixNano()-sent))
		}
	}
}

// stop ends the watch, without waiting for its reader, which may run late,
// and returns the longest wait it saw, that of a datagram still unread
// included; 0 when it could not watch.
func (w *lagWatch) stop() time.Duration {
	if w.c == nil {
		return 0
	}
	lag := w.worst.Load()
	if sent := w.sent.Load(); sent != 0 {
		lag = max(lag, time.Now().UnixNano()-sent)
	}
	w.stopped.Store(true)
	_ = w.c.SetReadDeadline(time.Now()) // wakes the reader, which closes the socket
	return time.Duration(lag)
}

// timedOut reports whether err is a network timeout.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
	"CLUSTERDOWN", "MISCONF", "NOREPLICAS", "OOM", "ERR unknown command", "ERR Protocol error"}

// deadlineError returns err, made to wrap context.DeadlineExceeded too when
// it is a network timeout at or after ctx's deadline (go-redis with
// ContextTimeoutEnabled reports a deadline as an i/o timeout, and callers
// test for context.DeadlineExceeded whichever way the deadline was met), a
// Cluster's TRYAGAIN until ctx ended, or no connection of the go-redis
// pool in time (past its PoolTimeout, or all MaxActiveConns busy): no
// answer in time, whose cause may be this process's (see report), not a
// refusal of Redis's. Such a call may have been sent all the same: go-redis
// retries a command whose read failed, and the retry may find no
// connection, so it is lost, not unsent.
func deadlineError(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	if isTryAgain(err) && ctx.Err() != nil {
		// A slot that moved for longer than the call's time: no answer.
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
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
		!errors.Is(err, redis.ErrClosed) && !errors.Is(err, ErrUnavailable) { // failed at once, without a round trip
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
	// The Sentinel client's master, as the last connection dialed reached
	// it, and the Clients to tell when it changes (see recent).
	master  atomic.Pointer[string]
	mu      sync.Mutex
	clients []weak.Pointer[Client]
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

// DialHook notes the dials that fail, and, on a Sentinel client, the
// master that each connection reaches.
func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err != nil && !slowDial(err):
			d.note(addr, err)
		case err == nil && addr == failoverAddr:
			d.reached(conn.RemoteAddr().String())
		}
		return conn, err
	}
}

// reached notes that a connection of a Sentinel client reached master:
// when it is another than the last one, the master changed, and the
// Clients write the grants they made into it (see recent).
func (d *dials) reached(master string) {
	prev := d.master.Swap(&master)
	if prev == nil || *prev == master {
		return
	}
	d.mu.Lock()
	clients := append([]weak.Pointer[Client](nil), d.clients...)
	d.mu.Unlock()
	for _, wc := range clients {
		if c := wc.Value(); c != nil {
			c.recent.replay(func(*Limiter) bool { return true })
		}
	}
}

// register has the master changes of d's client told to c.
func (d *dials) register(c *Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := d.clients[:0]
	for _, wc := range d.clients {
		if wc.Value() != nil {
			live = append(live, wc)
		}
	}
	d.clients = append(live, weak.Make(c))
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
// not known without a round trip (a Cluster's slot map not loaded yet).
func (c *Client) addrOf(ctx context.Context, l *Limiter) (network, addr string) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return cmpNetwork(r.Options().Network), r.Options().Addr
	case *redis.ClusterClient:
		if n, err := r.MasterForKey(ctx, l.keys[0]); err == nil {
			return cmpNetwork(n.Options().Network), n.Options().Addr
		}
	}
	return "", ""
}

// lateWake is how much later than its deadline a goroutine may learn that
// a dial failed before that says this process was starved of CPU: a timer
// of a process that runs fires within a few milliseconds.
const lateWake = 100 * time.Millisecond

// dialerOf returns a dial of a new connection to the Redis that serves
// l's keys, as the go-redis client dials it (TLS, a Sentinel's master), or
// nil when the go-redis client has no single server for them.
func (c *Client) dialerOf(ctx context.Context, l *Limiter) func(context.Context) (net.Conn, error) {
	var o *redis.Options
	switch r := c.rdb.(type) {
	case *redis.Client:
		o = r.Options()
	case *redis.ClusterClient:
		n, err := r.MasterForKey(ctx, l.keys[0])
		if err != nil {
			return nil
		}
		o = n.Options()
	}
	if o == nil || o.Dialer == nil {
		return nil
	}
	network := cmpNetwork(o.Network)
	return func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, network, o.Addr) }
}

// cmpNetwork returns network, or "tcp", go-redis's default.
func cmpNetwork(network string) string {
	if network == "" {
		return "tcp"
	}
	return network
}
