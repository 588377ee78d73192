package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Request is what a framework adapter exposes to key functions. Adapters for
// gin, echo, fiber and net/http implement it; tests can use any small type.
// A Request is valid only during the call it is passed to: a key function
// must not keep it, since adapters may reuse it for the next request.
type Request interface {
	// Context returns the request's context.
	Context() context.Context
	// Method returns the HTTP method, such as "GET".
	Method() string
	// Route returns the template of the matched route, such as "/users/:id"
	// or the net/http pattern "GET /users/{id}", or "" when no route matched.
	Route() string
	// Path returns the raw URL path. Route never uses it as a key.
	Path() string
	// Header returns the first value of the named header, or "" if absent.
	Header(name string) string
	// HeaderValues returns all values of the named header, one per header
	// line, in the order they were received.
	HeaderValues(name string) []string
	// Query returns the first value of the named query parameter, or "".
	Query(name string) string
	// RemoteAddr returns the address of the TCP peer: "host:port",
	// "[v6]:port" or a bare IP address.
	RemoteAddr() string
	// Value returns the request-scoped value stored under key by earlier
	// middleware (gin and echo c.Get, fiber Locals, context values), or nil.
	Value(key any) any
}

// A KeyFunc appends a key part for r to dst and returns the extended buffer.
// The appended bytes are never empty and contain only [A-Za-z0-9._-], '%'
// escapes, ':' separators (from Join) and '~' hashed forms, so a key part
// can safely go into a Redis key. On error, a KeyFunc returns dst unchanged
// together with the error.
//
// KeyFuncs returned by this package are safe for concurrent use. A KeyFunc
// written by hand must keep the same promises; Func builds one from a
// function that returns a string.
type KeyFunc func(r Request, dst []byte) ([]byte, error)

// ErrNoKey is returned, wrapped with a short reason, when a request has no
// key: no user, API key, header or matched route, or a client address that
// cannot be determined. Test for it with errors.Is.
var ErrNoKey = errors.New("keyfunc: no key")

// noKey returns an error wrapping ErrNoKey with a fixed reason. KeyFuncs
// build their errors once, so that a missing key costs no allocation.
func noKey(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNoKey}, args...)...)
}

var (
	errEmptyFunc   = noKey("key function returned an empty string")
	errEmptyStatic = noKey("empty static key")
	errEmptyPart   = noKey("key function appended an empty part")
	errNoRoute     = noKey("no matched route")
	errNoUserFunc  = noKey("no user")
	errEmptyJoin   = noKey("Join of no key functions")
	errEmptyFallbk = noKey("Fallback of no key functions")
)

// Func returns a KeyFunc that calls f and appends its result escaped with
// AppendEscaped. An error from f is returned unchanged; an empty result gives
// an error wrapping ErrNoKey.
func Func(f func(Request) (string, error)) KeyFunc {
	mustFunc("Func", f == nil)
	return func(r Request, dst []byte) ([]byte, error) {
		s, err := f(r)
		if err != nil {
			return dst, err
		}
		if s == "" {
			return dst, errEmptyFunc
		}
		return AppendEscaped(dst, s), nil
	}
}

// Static returns a KeyFunc that appends the constant s, escaped, whatever the
// request: Static("global") puts all requests in one bucket. Static("")
// returns a KeyFunc that always fails with an error wrapping ErrNoKey.
func Static(s string) KeyFunc {
	if s == "" {
		return func(_ Request, dst []byte) ([]byte, error) { return dst, errEmptyStatic }
	}
	part := AppendEscaped(nil, s)
	return func(_ Request, dst []byte) ([]byte, error) {
		return append(dst, part...), nil
	}
}

// User returns a KeyFunc that uses the request-scoped value stored under key
// by an earlier authentication middleware (see Request.Value). The value may
// be a string, a fmt.Stringer, or a value of a predeclared integer type
// (int, int64, uint64 and so on), which is written in decimal; the integer
// 42 and the string "42" give the same part. A missing value, a value of
// another type (including named string and integer types that do not
// implement fmt.Stringer) and an empty string give an error wrapping ErrNoKey.
func User(key any) KeyFunc {
	errMissing := noKey("no user value under key %v", key)
	errType := noKey("user value under key %v has an unsupported type", key)
	return func(r Request, dst []byte) ([]byte, error) {
		var s string
		switch v := r.Value(key).(type) {
		case nil:
			return dst, errMissing
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case int:
			return strconv.AppendInt(dst, int64(v), 10), nil
		case int8:
			return strconv.AppendInt(dst, int64(v), 10), nil
		case int16:
			return strconv.AppendInt(dst, int64(v), 10), nil
		case int32:
			return strconv.AppendInt(dst, int64(v), 10), nil
		case int64:
			return strconv.AppendInt(dst, v, 10), nil
		case uint:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint8:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint16:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint32:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint64:
			return strconv.AppendUint(dst, v, 10), nil
		default:
			return dst, errType
		}
		if s == "" {
			return dst, errMissing
		}
		return AppendEscaped(dst, s), nil
	}
}

// UserFunc returns a KeyFunc that uses the user identifier returned by f.
// When f reports false or returns "", the KeyFunc fails with an error
// wrapping ErrNoKey.
func UserFunc(f func(Request) (string, bool)) KeyFunc {
	mustFunc("UserFunc", f == nil)
	return func(r Request, dst []byte) ([]byte, error) {
		s, ok := f(r)
		if !ok || s == "" {
			return dst, errNoUserFunc
		}
		return AppendEscaped(dst, s), nil
	}
}

// Route returns a KeyFunc that uses the method and the route template of the
// request, Method()+" "+Route(), escaped as one part: "GET /users/:id"
// becomes "GET%20%2Fusers%2F%3Aid". Every user of a route shares one bucket,
// whatever the path parameters. The raw path is never used, since it would
// give attackers unlimited distinct keys; a request that matched no route
// gives an error wrapping ErrNoKey. The template is used as the adapter
// reports it: a net/http pattern that names a method gives
// "GET%20GET%20%2Fusers%2F%7Bid%7D".
func Route() KeyFunc {
	return func(r Request, dst []byte) ([]byte, error) {
		route := r.Route()
		if route == "" {
			return dst, errNoRoute
		}
		method := r.Method()
		if len(method)+1+len(route) > maxRawLen {
			return appendHashed3(dst, method, " ", route), nil
		}
		dst = appendEscaped(dst, method)
		dst = append(dst, "%20"...)
		return appendEscaped(dst, route), nil
	}
}

// Header returns a KeyFunc that uses the first value of the named header,
// escaped. A missing or empty header gives an error wrapping ErrNoKey.
// Clients choose their headers freely: use Header for values set by a trusted
// component in front of the application, and APIKey for secrets.
func Header(name string) KeyFunc {
	errMissing := noKey("missing header %q", name)
	return func(r Request, dst []byte) ([]byte, error) {
		v := r.Header(name)
		if v == "" {
			return dst, errMissing
		}
		return AppendEscaped(dst, v), nil
	}
}

// Join returns a KeyFunc that appends the parts of all fns, in order,
// separated by ':'. Since no part contains ':', different combinations of
// parts give different keys. If any of fns fails, or appends nothing, Join
// returns its error. Join of no functions always fails with an error wrapping
// ErrNoKey. Join panics if one of fns is nil.
func Join(fns ...KeyFunc) KeyFunc {
	fns = cloneFuncs("Join", fns)
	if len(fns) == 0 {
		return func(_ Request, dst []byte) ([]byte, error) { return dst, errEmptyJoin }
	}
	return func(r Request, dst []byte) ([]byte, error) {
		n := len(dst)
		out := dst
		for i, fn := range fns {
			if i > 0 {
				out = append(out, ':')
			}
			start := len(out)
			var err error
			out, err = fn(r, out)
			if err != nil {
				return dst[:n], err
			}
			if len(out) <= start {
				return dst[:n], errEmptyPart
			}
		}
		return out, nil
	}
}

// Fallback returns a KeyFunc that uses the first of fns that succeeds, such
// as Fallback(User("user"), IP()) to limit signed-in users by account and
// other clients by address. If all of fns fail, Fallback returns the error of
// the last one, so errors.Is(err, ErrNoKey) reports whether it was a missing
// key. Fallback of no functions always fails with an error wrapping ErrNoKey.
// Fallback panics if one of fns is nil.
//
// The parts of different functions are not told apart: a user whose
// identifier is "192.0.2.1" gets the same part as a client at that address.
// When that matters, tag each alternative, as in
//
//	Fallback(Join(Static("user"), User("user")), Join(Static("ip"), IP()))
func Fallback(fns ...KeyFunc) KeyFunc {
	fns = cloneFuncs("Fallback", fns)
	if len(fns) == 0 {
		return func(_ Request, dst []byte) ([]byte, error) { return dst, errEmptyFallbk }
	}
	return func(r Request, dst []byte) ([]byte, error) {
		n := len(dst)
		var err error
		for _, fn := range fns {
			var out []byte
			out, err = fn(r, dst[:n])
			if err == nil {
				if len(out) <= n {
					err = errEmptyPart
					continue
				}
				return out, nil
			}
		}
		return dst[:n], err
	}
}

// cloneFuncs copies fns so that the caller cannot change them later, and
// panics on a nil function.
func cloneFuncs(name string, fns []KeyFunc) []KeyFunc {
	for _, fn := range fns {
		mustFunc(name, fn == nil)
	}
	return append([]KeyFunc(nil), fns...)
}

func mustFunc(name string, isNil bool) {
	if isNil {
		panic("keyfunc: nil function passed to " + name)
	}
}
