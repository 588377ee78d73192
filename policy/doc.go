// Package policy is the framework-free decision engine behind the
// middleware packages ginrl, echorl, fiberrl and nethttprl. A Policy is one
// named rate limit applied to HTTP requests: it turns a request into a
// limiter name, acquires the request's cost in one round trip with a rate
// defined in code, waits for a permit when wait mode is on, applies the
// failure policy when Redis cannot answer, and writes the response headers.
// Each adapter only translates its framework's request and response, so
// they all behave alike.
//
// # Limiter names
//
// A request's limiter name is the Client's key prefix, the escaped policy
// name, ':' and the key parts built by the policy's key functions (package
// keyfunc), which are escaped or hashed so that no client-chosen value can
// forge another key, break a Redis Cluster hash tag, or put a raw API key
// into Redis. With the policy "api" and the IP key, a client at 192.0.2.1
// is limited under "api:192.0.2.1".
//
// # Wait mode
//
// With WithWait, a request over the limit waits for a permit, but only when
// the exact time until the permit comes back fits in both the maximum wait
// and what is left of the request's own deadline; otherwise it is rejected
// at once. A client that goes away ends its wait. At most MaxWaiters
// requests wait at once in one policy; beyond that they are rejected.
//
// # Failure policy
//
// Each Redis round trip has its own timeout (100 ms by default). When Redis
// is down or slow, or a request has no key, the decision fails: by default
// the request is served (fail open) and the error goes to the adapter's
// error handler, which logs it; WithFailClosed answers 503 instead. No
// decision hangs a request, and no error text reaches a response.
//
// # Headers
//
// Limited responses carry the IETF draft-10 fields
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// and X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
// (seconds). A 429 also carries Retry-After, in whole seconds rounded up, so
// never earlier than the real wait, and an RFC 9457 problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded.
package policy
