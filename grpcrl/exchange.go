package grpcrl

import (
	"cmp"
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/redlimit/redlimit/internal/native"
)

type call struct { // a call, as a policy.Exchange
	ctx           context.Context
	route         string         // its full method, or unknownMethod
	md            metadata.MD    // the rate limit fields
	headers       native.Headers // their values
	native.Shared                // what the call's policies share
}

func (x *call) Context() context.Context       { return x.ctx }
func (x *call) SetContext(ctx context.Context) { x.ctx = ctx }
func (x *call) SetHeader(name, value string)   { x.headers.Set(http.Header(x.md), lower(name), value) }

// lowered holds the metadata keys of the header names the policies set: a
// few, whatever the calls.
var lowered sync.Map

// lower returns name in lower case, as metadata keys are.
func lower(name string) string {
	if l, ok := lowered.Load(name); ok {
		return l.(string)
	}
	l := strings.ToLower(name)
	lowered.Store(name, l)
	return l
}
func (x *call) Route() (string, error)         { return x.route, nil }
func (x *call) Header(k string) string         { return cmp.Or(x.HeaderValues(k)...) }
func (x *call) HeaderValues(k string) []string { return metadata.ValueFromIncomingContext(x.ctx, k) }
func (x *call) Query(string) string            { return "" }
func (x *call) Value(key any) any              { return x.ctx.Value(key) }

// RemoteAddrPort returns the peer's TCP address, which keyfunc.IP reads
// with no string made and parsed again.
func (x *call) RemoteAddrPort() netip.AddrPort {
	if p, ok := peer.FromContext(x.ctx); ok {
		return native.AddrPort(p.Addr)
	}
	return netip.AddrPort{}
}

func (x *call) RemoteAddr() string {
	if p, ok := peer.FromContext(x.ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
