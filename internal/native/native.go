// Package native lets the adapters read keys, rates and costs from their
// framework's own request type.
package native

import (
	"errors"
	"net/http"

	"github.com/redlimit/redlimit/internal/reqlimits"
	"github.com/redlimit/redlimit/keyfunc"
)

// Func returns f as a function of a keyfunc.Request: one that an adapter's
// policy.Exchange presents, with a method Native that returns the
// framework's request C. Called with any other request, it fails with an
// error that names pkg. It panics if f is nil.
func Func[C, T any](pkg string, f func(C) (T, error)) func(keyfunc.Request) (T, error) {
	if f == nil {
		panic(pkg + ": nil function")
	}
	errForeign := errors.New(pkg + ": a function of its Key, RateFunc or CostFunc used outside its middleware")
	return func(r keyfunc.Request) (T, error) {
		if x, ok := r.(interface{ Native() C }); ok {
			return f(x.Native())
		}
		var zero T
		return zero, errForeign
	}
}

// Route returns the route of a request to a framework that routes by
// method, as keyfunc.Request.Route gives it: the route's method and path
// template, or "" when the request matched no route (path is "").
func Route(method, path string) string {
	if path == "" {
		return ""
	}
	return method + " " + path
}

// Headers sets the response header fields of one request, as
// policy.Exchange.SetHeader does: an adapter's exchange holds one, so that
// the fields a decision sets take their value slices from it rather than
// one allocation each.
type Headers struct {
	vals [6]string
	n    int
}

// Set sets the field name, in canonical form, of h to value: an empty
// value removes it.
func (hs *Headers) Set(h http.Header, name, value string) {
	switch {
	case value == "":
		delete(h, name)
	case hs.n == len(hs.vals):
		h[name] = []string{value}
	default:
		hs.vals[hs.n] = value
		h[name] = hs.vals[hs.n : hs.n+1 : hs.n+1] // an append makes a copy
		hs.n++
	}
}

// Shared holds, in an adapter's exchange (made for each request), what the
// policies applied to the request share, so that the request's first
// policy allocates nothing for it.
type Shared = reqlimits.Shared
