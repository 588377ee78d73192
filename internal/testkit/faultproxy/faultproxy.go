// Package faultproxy is test support: a small TCP proxy to put between a
// Redis client and redis-server, which injects network faults on demand
// while traffic flows. It is not for production use.
//
// A Proxy listens on 127.0.0.1 (a free port) and forwards every connection
// it accepts to its target, both directions. At any time, from any
// goroutine, a test can:
//   - add latency per direction (SetLatency): every chunk of bytes (what one
//     read returned) is delivered no earlier than the latency after it was
//     read, in order; chunks in flight do not wait for one another, so the
//     latency does not accumulate under pipelining;
//   - drop the next n server→client replies (DropReplies), optionally only
//     replies that match a predicate: their bytes are swallowed whole and
//     the connection is kept, as when a response is lost after the server
//     executed the command;
//   - reset every connection (ResetAll): both sides are closed with
//     SO_LINGER 0, so the peers see a TCP RST;
//   - blackhole (SetBlackhole): nothing is forwarded any more. Existing
//     connections stall (their bytes are held, and delivered once the
//     blackhole ends); connections accepted meanwhile are never connected
//     to the target: what they send is read and discarded until they close.
//
// Close stops the listener, closes every connection and returns once every
// goroutine of the proxy has ended.
//
// To find reply boundaries, the server→client direction goes through a
// minimal RESP framer (RESP2 and RESP3: simple strings, errors, integers,
// bulk strings, arrays, nulls, doubles, booleans, big numbers, blob errors,
// verbatim strings, maps, sets, attributes and pushes). It checks framing
// only, not values. An attribute belongs to the reply that follows it; a
// push (RESP3 '>') is out of band: it is never dropped nor counted as a
// reply. A stream the framer cannot read (streamed aggregates, garbage) is
// forwarded as is from then on, and DropReplies no longer applies to that
// connection. Replies are forwarded whole: the bytes of a reply that has
// not fully arrived are held until it has.
//
// DropReplies is meant for a connection with one request in flight, where
// it is the lost response of a request the server executed. On a
// pipelined connection, a reply dropped between others shifts the client's
// reading (it takes the next reply for the dropped one's), which no real
// network does.
//
// Every connection costs four goroutines, a reader and a writer per
// direction (after one that dials the target), a blackholed one a single
// one.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy with runtime fault controls. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	upDelay, downDelay atomic.Int64 // nanoseconds
	dropped            atomic.Int64
	accepted           atomic.Int64

	mu        sync.Mutex
	links     map[*link]struct{}
	closed    bool
	blackhole bool
	open      chan struct{} // closed when no blackhole is on
	dropLeft  int
	dropMatch func(reply []byte) bool
}

// chunkQueue is how many chunks a direction holds in flight before its
// reader stops reading (TCP back-pressure then applies).
const chunkQueue = 256

// Start listens on 127.0.0.1 and forwards each accepted connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, open: open}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address clients dial: 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency sets the latency added to each chunk client→server (up) and
// server→client (down). It applies to chunks read from then on.
func (p *Proxy) SetLatency(up, down time.Duration) {
	p.upDelay.Store(int64(max(up, 0)))
	p.downDelay.Store(int64(max(down, 0)))
}

// DropReplies makes the proxy swallow the next n server→client replies,
// on whichever connection they come, for which match returns true (every
// reply when match is nil). match gets the raw bytes of the whole reply
// and must not keep them. It replaces any drop still pending; n <= 0
// cancels it.
func (p *Proxy) DropReplies(n int, match func(reply []byte) bool) {
	p.mu.Lock()
	p.dropLeft, p.dropMatch = max(n, 0), match
	p.mu.Unlock()
}

// PendingDrops returns how many replies DropReplies still has to drop.
func (p *Proxy) PendingDrops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropLeft
}

// Dropped returns the number of replies dropped so far.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Conns returns the number of connections open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// ResetAll closes every open connection hard: both the client's and the
// target's side get a TCP RST (SO_LINGER 0). It returns how many
// connections it reset. New connections are accepted as before.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
	return len(links)
}

// SetBlackhole turns the blackhole on or off. While it is on, nothing is
// forwarded: open connections stall with their bytes held, and connections
// accepted meanwhile are never connected to the target (they stay dead
// after it ends, until their client closes them or ResetAll).
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blackhole {
		return
	}
	p.blackhole = on
	if on {
		p.open = make(chan struct{})
	} else {
		close(p.open)
	}
}

// Close stops accepting, resets every connection and waits for every
// goroutine of the proxy to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed (or the listener failed: nothing more to accept)
		}
		p.accepted.Add(1)
		l := &link{p: p, client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			hardClose(c)
			return
		}
		p.links[l] = struct{}{}
		black := p.blackhole
		p.mu.Unlock()
		p.wg.Add(1)
		if black {
			go l.discard()
		} else {
			go l.start()
		}
	}
}

// takeDrop reports whether the reply must be dropped, and counts it.
func (p *Proxy) takeDrop(reply []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropLeft == 0 || (p.dropMatch != nil && !p.dropMatch(reply)) {
		return false
	}
	p.dropLeft--
	p.dropped.Add(1)
	return true
}

// gate returns a channel that is closed when no blackhole is on.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// link is one proxied connection.
type link struct {
	p      *Proxy
	client net.Conn
	server net.Conn // nil until dialled, and for a blackholed link
	mu     sync.Mutex
	done   chan struct{}
	closed bool
}

// chunk is bytes read from one side, to be written to the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// close closes both sides once; hard closes send RST.
func (l *link) close(hard bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	server := l.server
	close(l.done)
	l.mu.Unlock()
	for _, c := range []net.Conn{l.client, server} {
		if c == nil {
			continue
		}
		if hard {
			hardClose(c)
		} else {
			_ = c.Close()
		}
	}
	l.p.mu.Lock()
	delete(l.p.links, l)
	l.p.mu.Unlock()
}

func hardClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// discard reads and drops what a blackholed connection sends.
func (l *link) discard() {
	defer l.p.wg.Done()
	buf := make([]byte, 16<<10)
	for {
		if _, err := l.client.Read(buf); err != nil {
			l.close(false)
			return
		}
	}
}

// start dials the target and runs the four pumps of the link. A target
// that cannot be reached resets the client, as a refused connection would.
func (l *link) start() {
	defer l.p.wg.Done()
	server, err := net.DialTimeout("tcp", l.p.target, time.Second)
	if err != nil {
		l.close(true)
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		hardClose(server)
		return
	}
	l.server = server
	l.mu.Unlock()
	up := make(chan chunk, chunkQueue)
	down := make(chan chunk, chunkQueue)
	l.p.wg.Add(4)
	go l.read(l.client, up, &l.p.upDelay, nil)
	go l.write(server, up)
	go l.read(server, down, &l.p.downDelay, &framer{})
	go l.write(l.client, down)
}

// read pumps src into out, stamping each chunk with its due time. With a
// framer, only whole replies go out, minus those dropped.
func (l *link) read(src net.Conn, out chan<- chunk, delay *atomic.Int64, f *framer) {
	defer l.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			due := time.Now().Add(time.Duration(delay.Load()))
			var data []byte
			if f == nil {
				data = append([]byte(nil), buf[:n]...)
			} else {
				data = l.frame(f, buf[:n])
			}
			if len(data) > 0 {
				select {
				case out <- chunk{data: data, due: due}:
				case <-l.done:
					return
				}
			}
		}
		if err != nil {
			l.close(false)
			return
		}
	}
}

// frame feeds b to f and returns the bytes to forward: the whole replies
// completed, except those dropped.
func (l *link) frame(f *framer, b []byte) []byte {
	if f.broken {
		return append([]byte(nil), b...)
	}
	f.buf = append(f.buf, b...)
	var out []byte
	for {
		msg, push, err := f.next()
		if err != nil {
			// Unreadable: forward everything as is from now on.
			f.broken = true
			out = append(out, f.buf...)
			f.buf, f.off = nil, 0
			return out
		}
		if msg == nil {
			return out
		}
		if push || !l.p.takeDrop(msg) {
			out = append(out, msg...)
		}
		f.consume()
	}
}

// write pumps in into dst, each chunk at its due time and only while no
// blackhole is on.
func (l *link) write(dst net.Conn, in <-chan chunk) {
	defer l.p.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		select {
		case c = <-in:
		case <-l.done:
			return
		}
		if wait := time.Until(c.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		select {
		case <-l.p.gate():
		case <-l.done:
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close(false)
			return
		}
	}
}
