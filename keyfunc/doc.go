// Package keyfunc turns HTTP requests into keys, the part of a rate
// limiter's name that says who is limited: the client's IP address, the
// signed-in user, the route, an API key or a header. Key functions do not
// depend on any web framework: each framework adapter implements the small
// Request interface, and each adapter also turns a function of its own
// context (a *gin.Context, an echo.Context, a *fiber.Ctx, an *http.Request)
// into a KeyFunc.
//
// A KeyFunc returns its key as a plain string:
//
//	key := keyfunc.Join(keyfunc.Route(), keyfunc.User("user"))
//	k, err := key(req) // "GET%20%2Fusers%2F%3Aid:alice": each part escaped
//
// # Escaping
//
// Keys go into Redis keys, so no value chosen by a client may forge another
// key or break a Redis Cluster hash tag. Package policy escapes every key
// with Escape before it uses it, so key functions, including those written
// by hand, return raw values: the bytes A-Z, a-z, 0-9, '.', '_' and '-' are
// kept and every other byte becomes %XX; values longer than 64 bytes are
// replaced by '~' and a base64url SHA-256 digest, a form escaping cannot
// produce. Different keys therefore give different limiter names. Join
// escapes each of its parts before joining them with ':', so a user named
// "a:GET" cannot share a key with user "a" on a GET route; the policy then
// escapes the joined key as any other, so its parts are escaped twice
// ("%" becomes "%25"), which keeps keys apart all the same. API keys are
// never used raw: APIKey returns their digest.
//
// # Client addresses behind proxies
//
// Without options, IP uses the TCP peer address of the request, which a
// client cannot forge. Behind a load balancer or reverse proxy, the peer is
// the proxy, and the client address is in a header such as X-Forwarded-For
// that the proxy appends to. The client can send that header too, with any
// content, so IP reads it only with TrustProxies, and only from trusted
// peers. It then walks the header from the right, skipping the addresses of
// trusted proxies, and takes the first other address: the address that the
// outermost trusted proxy saw. For example, with
//
//	keyfunc.IP(keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
//
// a request from peer 10.0.0.2 carrying
//
//	X-Forwarded-For: 198.51.100.9, 203.0.113.7, 10.0.0.1
//
// is keyed on 203.0.113.7: 10.0.0.1 is a trusted proxy, 203.0.113.7 connected
// to it, and 198.51.100.9 was written by the client, so it is ignored. The
// same header from peer 192.0.2.1, which is not trusted, is keyed on
// 192.0.2.1. IPv6 clients are grouped by /64 by default (see IPv6PrefixLen).
//
// # Security
//
// Never key on X-Forwarded-For, Forwarded or X-Real-IP without
// TrustProxies, and list only proxies you run: a client that can set the
// header itself can pick a fresh key for every request and so is not limited
// at all. This is why this package does not use the frameworks' own client
// address helpers: gin's Context.ClientIP trusts every proxy unless
// SetTrustedProxies is called, and echo v4's Context.RealIP reads
// X-Forwarded-For and X-Real-IP from any peer unless an IPExtractor is set.
//
// Headers, query parameters and user identifiers are only as trustworthy as
// what sets them: Header should name a header set by a trusted component,
// User a value set by authentication middleware, and APIKey should run after
// the key was checked, or behind an IP limit, since made-up keys each get
// their own bucket.
package keyfunc
