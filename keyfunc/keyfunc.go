package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Request is what a framework adapter exposes to key functions. Adapters for
// gin, echo, fiber and net/http implement it; tests can use any small type.
// A Request is valid only during the call it is passed to: a key function
// must not keep it, nor the strings it returns, which may be views of the
// framework's buffers.
type Request interface {
	// Context returns the request's context.
	Context() context.Context
	// Route returns the route the request matched, as the application
	// registered it: the route's method and path template, such as
	// "GET /users/:id" or, for net/http, "GET /users/{id}", or the template
	// alone for a route of every method (a ServeMux pattern without one,
	// "/users/{id}"), or "" when the request matched no route. The method
	// is the route's, not the one the client sent. It returns an error
	// wrapping ErrRouteUnknown where the framework cannot know the route,
	// such as in middleware that runs before routing; the error says where
	// the middleware belongs instead.
	Route() (string, error)
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
	// middleware (gin and echo c.Set, fiber Locals, context values), or nil.
	Value(key any) any
}

// A KeyFunc returns the key of a request: who or what the request is
// limited as, such as a user id or a client address. Any string will do:
// package policy escapes or hashes the key before it goes into a limiter
// name (see Escape), so that no value can forge another key. An empty key,
// or an error, means that the request has no key, and the policy's
// missing-key rule applies; an error other than ErrNoKey is also reported
// (to the error handler, or the log, and the observer).
//
// KeyFuncs returned by this package are safe for concurrent use, and so
// must be those written by hand.
type KeyFunc func(r Request) (string, error)

// ErrNoKey is returned, wrapped with a short reason, when a request has no
// key: no user, API key, header or matched route, or a client address that
// cannot be determined. Test for it with errors.Is.
var ErrNoKey = errors.New("keyfunc: no key")

// ErrRouteUnknown is wrapped by the error of Route, and of Request.Route,
// where the framework cannot know the route of a request: a configuration
// error, not a missing key.
var ErrRouteUnknown = errors.New("keyfunc: the route is not known here")

// noKey returns an error wrapping ErrNoKey with a fixed reason. KeyFuncs
// build their errors once, so that a missing key costs no allocation.
func noKey(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNoKey}, args...)...)
}

var (
	errEmptyStatic = noKey("empty static key")
	errEmptyPart   = noKey("key function returned an empty key")
	errNoRoute     = noKey("no matched route")
	errEmptyJoin   = noKey("Join of no key functions")
	errEmptyFallbk = noKey("Fallback of no key functions")
)

// Static returns a KeyFunc that returns s whatever the request:
// Static("global") puts all requests in one bucket. Static("") returns a
// KeyFunc that always fails with an error wrapping ErrNoKey.
func Static(s string) KeyFunc {
	if s == "" {
		return func(Request) (string, error) { return "", errEmptyStatic }
	}
	return func(Request) (string, error) { return s, nil }
}

// User returns a KeyFunc that uses the request-scoped value stored under key
// by an earlier authentication middleware (see Request.Value). The value may
// be a string, a fmt.Stringer, or a value of a predeclared integer type
// (int, int64, uint64 and so on), which is written in decimal; the integer
// 42 and the string "42" give the same key. A missing value, a value of
// another type (including named string and integer types that do not
// implement fmt.Stringer) and an empty string give an error wrapping
// ErrNoKey.
func User(key any) KeyFunc {
	errMissing := noKey("no user value under key %v", key)
	errType := noKey("user value under key %v has an unsupported type", key)
	return func(r Request) (string, error) {
		var s string
		switch v := r.Value(key).(type) {
		case nil:
			return "", errMissing
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			s = fmt.Sprint(v)
		default:
			return "", errType
		}
		if s == "" {
			return "", errMissing
		}
		return s, nil
	}
}

// Route returns a KeyFunc that uses the route the request matched, as the
// application registered it (Request.Route), such as "GET /users/:id":
// every user of a route shares one bucket, whatever the path parameters.
// The raw path and the method the client sent are never used, since they
// would give clients unlimited distinct keys: a HEAD request counts with
// its GET route, methods outside the standard ones (GET, HEAD, POST, PUT,
// PATCH, DELETE, OPTIONS, CONNECT, TRACE) count as one, "OTHER", and a
// route that takes every method has one key for all of them. A request
// that matched no route (a 404) has no key: the error wraps ErrNoKey.
// Where the framework cannot know the route (see Request.Route), the error
// wraps ErrRouteUnknown: the policy's missing-key rule applies, and the
// error, which says where the middleware belongs, is reported.
func Route() KeyFunc {
	return func(r Request) (string, error) {
		route, err := r.Route()
		if err != nil {
			return "", err
		}
		if route == "" {
			return "", errNoRoute
		}
		method, path, ok := strings.Cut(route, " ")
		if !ok {
			return route, nil // a route of every method
		}
		return routeMethod(method) + " " + strings.TrimLeft(path, " \t"), nil
	}
}

// routeMethod returns the method a route key names for a route's method:
// GET for HEAD, OTHER for any but the standard methods.
func routeMethod(m string) string {
	switch m {
	case "GET", "HEAD":
		return "GET"
	case "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return m
	}
	return "OTHER"
}

// Header returns a KeyFunc that uses the first value of the named header. A
// missing or empty header gives an error wrapping ErrNoKey. Clients choose
// their headers freely: use Header for values set by a trusted component in
// front of the application, and APIKey for secrets.
func Header(name string) KeyFunc {
	errMissing := noKey("missing header %q", name)
	return func(r Request) (string, error) {
		v := r.Header(name)
		if v == "" {
			return "", errMissing
		}
		return v, nil
	}
}

// Join returns a KeyFunc that joins the keys of all fns, in order, each
// escaped with Escape, with ':' between them. Escaped keys never contain
// ':', so different combinations give different keys: Join of "a:b" and
// "c" is not Join of "a" and "b:c". If any of fns fails, or returns "",
// Join returns its error. Join of no functions always fails with an error
// wrapping ErrNoKey. Join panics if one of fns is nil.
func Join(fns ...KeyFunc) KeyFunc {
	fns = cloneFuncs("Join", fns)
	if len(fns) == 0 {
		return func(Request) (string, error) { return "", errEmptyJoin }
	}
	return func(r Request) (string, error) {
		parts := make([]string, len(fns))
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", errEmptyPart
			}
			parts[i] = Escape(k)
		}
		return strings.Join(parts, ":"), nil
	}
}

// Fallback returns a KeyFunc that uses the first of fns that returns a key,
// such as Fallback(User("user"), APIKey("X-API-Key")). A function that
// fails with an error wrapping ErrNoKey, or returns "", passes to the next;
// any other error is returned at once. If none has a key, Fallback returns
// the error of the last one. Fallback of no functions always fails with an
// error wrapping ErrNoKey. Fallback panics if one of fns is nil.
//
// The keys of different functions are not told apart: a user whose
// identifier is "192.0.2.1" gets the same key as a client at that address.
// When that matters, tag each alternative, as in
//
//	Fallback(Join(Static("user"), User("user")), Join(Static("key"), APIKey("X-API-Key")))
//
// A policy falls back to the client address by itself, in a namespace of
// its own, when its key function finds no key (see package policy).
func Fallback(fns ...KeyFunc) KeyFunc {
	fns = cloneFuncs("Fallback", fns)
	if len(fns) == 0 {
		return func(Request) (string, error) { return "", errEmptyFallbk }
	}
	return func(r Request) (string, error) {
		var err error
		for _, fn := range fns {
			var k string
			k, err = fn(r)
			switch {
			case err == nil && k != "":
				return k, nil
			case err == nil:
				err = errEmptyPart
			case !errors.Is(err, ErrNoKey):
				return "", err
			}
		}
		return "", err
	}
}

// cloneFuncs copies fns so that the caller cannot change them later, and
// panics on a nil function.
func cloneFuncs(name string, fns []KeyFunc) []KeyFunc {
	for _, fn := range fns {
		if fn == nil {
			panic("keyfunc: nil function passed to " + name)
		}
	}
	return append([]KeyFunc(nil), fns...)
}
