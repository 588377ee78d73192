package native

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/redlimit/redlimit/policy"
)

// Flow is what an adapter does at each step of a request C of its
// framework; Serve runs the steps, the same in every adapter.
type Flow[C any] struct {
	// OnError is WithErrorHandler's handler, or nil for the log. It
	// reports whether it answered the request, and the error to return
	// then.
	OnError func(C, error) (answered bool, err error)
	// Deny is WithDenyHandler's handler, or nil: it answers a request over
	// the limit (policy.ResultFrom gives its result).
	Deny func(C) error
	// Refuse answers a refused request with the policy's status and body.
	Refuse func(c C, status int, body []byte) error
	// Next runs the rest of the chain and returns the response's status.
	Next func(C) (status int, err error)
	// Hold, when not nil, reports whether the handler handed the
	// connection over, to be served after Next returned (fasthttp's
	// Hijack: a WebSocket): it then returns a function that arranges for
	// done to be called once that ends; else nil.
	Hold func(c C) (onEnd func(done func()))
}

// Serve applies p to the request c, which x presents to the policy: it
// decides, reports an error, answers a refusal or runs the chain, and
// tells the decision the response's status once the response is over: a
// handler that panics answers 500, and one that handed its connection over
// ends when that does (see Hold).
func (f *Flow[C]) Serve(p *policy.Policy, x policy.Exchange, c C) error {
	d := p.Decide(x)
	if d.Err != nil {
		if f.OnError == nil {
			p.LogError(x.Context(), d.Err)
		} else if answered, err := f.OnError(c, d.Err); answered {
			return err
		}
	}
	switch {
	case d.Status == http.StatusTooManyRequests && f.Deny != nil:
		return f.Deny(c)
	case d.Status != 0:
		return f.Refuse(c, d.Status, d.Body)
	}
	served := false
	defer func() {
		if !served { // the handler panicked: its slot, say, goes back
			d.Done(http.StatusInternalServerError)
		}
	}()
	status, err := f.Next(c)
	served = true
	if f.Hold != nil {
		if onEnd := f.Hold(c); onEnd != nil {
			// Only a connection handed over moves the decision to the
			// heap: every other request keeps it on the stack.
			held := d
			onEnd(func() { held.Done(status) })
			return err
		}
	}
	d.Done(status)
	return err
}

// Handlers sets OnError and Deny from the handlers of the options, for a
// framework whose handlers return errors (echo, fiber); nil handlers leave
// them nil. The error handler's answer stands when it returns an error, or
// when the function that wrote(c), called before it, returns reports that
// it wrote a response.
func (f *Flow[C]) Handlers(onError func(C, error) error, wrote func(C) func() bool, deny func(C) error) {
	if onError != nil {
		f.OnError = func(c C, err error) (bool, error) {
			written := wrote(c)
			err = onError(c, err)
			return err != nil || written(), err
		}
	}
	f.Deny = deny
}

// Closed is what a Hold returns for a connection handed over to a framework
// that closes a request's io.Closer values when it is done with the
// connection (fasthttp: set is RequestCtx.SetUserValue): done is stored
// under a key of its own, so each limit of the request keeps its own.
func Closed(set func(key, value any)) func(done func()) {
	return func(done func()) {
		h := &held{done}
		set(h, h)
	}
}

type held struct{ done func() }

func (h *held) Close() error { h.done(); return nil }

// AddrPort returns a TCP peer's address, for an exchange's RemoteAddrPort
// (see keyfunc.IP), and none for another kind of peer.
func AddrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}
