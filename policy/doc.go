// Package policy is the framework-free decision engine behind the
// middleware packages ginrl, echorl, fiberrl and nethttprl. A Policy is one
// named rate limit applied to HTTP requests: it turns a request into a
// limiter name, acquires the request's cost in one round trip with a rate
// defined in code, waits for a permit in wait mode, applies the failure
// policy when Redis cannot answer, and writes the response headers. Each
// adapter only translates its framework's request and response, so they
// all behave alike, and an adapter for another framework takes a page of
// code (see the example).
//
// # Limiter names
//
// A request's limiter name is the Client's key prefix, the policy name,
// ':' and the request's key (package keyfunc), the name and the key each
// escaped with keyfunc.Escape, so that no client-chosen value can forge
// another key, break a Redis Cluster hash tag, or put a raw API key into
// Redis. With the policy "api" and the default key, the client IP, a
// client at 192.0.2.1 is limited under "api:192.0.2.1".
//
// # Names and shared budgets
//
// Two middlewares share a budget only when they are given the same name
// with WithName on one Client, and then they must have the same rate, the
// same key functions and the same missing-key choice: New fails otherwise,
// naming the option. What it compares is the rate, the choice, and the code
// of each key function given to WithKey (the default key being keyfunc.IP):
// so it tells keyfunc.IP from keyfunc.User, or one hand-written function
// from another, but not two calls of one constructor with other arguments,
// such as keyfunc.User("a") and keyfunc.User("b"), nor two closures of one
// function literal. The names are kept per Client for as long as the
// Client lives.
//
// A middleware without a name is named after its rate: "100-per-1m" for
// 100 per minute, "10-per-10s", "5-per-1500ms". A second unnamed
// middleware of the same rate on the same Client is "100-per-1m-2", a
// third "100-per-1m-3", and so on, in the order they are built, skipping
// names already taken: two unnamed middlewares never share a budget, and
// a name given with WithName can never be one an unnamed middleware took.
// Processes that share limits through Redis must build their unnamed
// middlewares in the same order; naming each middleware is simpler.
//
// # A request without a key
//
// When the key function finds no key (no user, API key or matched route:
// an error wrapping keyfunc.ErrNoKey, or an empty key), the request is, by
// default, limited by its client IP in a namespace of its own, the limiter
// "<name>::ip:<address>", which no key can reach (WithMissingKeyIP).
// WithMissingKeyDeny answers such requests 403 instead, and
// WithMissingKeyServe serves them without a limit. A key function's other
// errors fail the decision, as does keyfunc.Route where the framework
// cannot know the route (keyfunc.ErrRouteUnknown).
//
// # Rates and costs per request
//
// WithRateFunc chooses each request's rate (a plan, a tenant's contract)
// and WithCostFunc its cost (a batch's size); the adapters also take them
// as functions of their framework's own context. The limiter name stays the
// policy name and the key: a key whose rate changes keeps one budget. A cost
// above the rate is answered 413, since the request could never be served.
//
// # Wait mode
//
// With WithWait, a request over the limit waits for a permit, but only when
// the exact time until the permit comes back fits in both the maximum wait
// and what is left of the request's own deadline; otherwise it is rejected
// at once. Waiters on one key take turns, first come first served, and a
// request joins only when its turn can come in time, counting the permits
// the waiters ahead of it need at the rate. A client that goes away ends
// its wait. At most WithMaxWaiters requests wait at once in one policy, and
// WithMaxWaitersPerKey on one key; beyond that they are rejected.
//
// # Failure policy
//
// Each Redis round trip has a timeout (100 ms by default). When Redis is
// down or slow, by default (WithFailLocal) each process decides in memory,
// at its share of the rate, with the same keys, headers and 429s, and asks
// Redis again with one request a second; WithFailOpen serves requests and
// passes the error to the adapter's error handler, which logs it;
// WithFailClosed answers 503. Local overload (core.ErrOverloaded: more
// decisions waiting for Redis than the Client allows) is decided in memory,
// or, under fail open or closed, shed with a 429. A key function that fails
// fails the decision: it is served, or answered 503 under fail closed, and
// its error goes to the error handler. No decision hangs a request, and no
// error text reaches a response.
//
// # The limits of one request
//
// An adapter tells the policies of one request two things: that a round
// trip of an earlier one failed (Decision.RedisFailed, Decide's
// redisFailed), so that later ones do not wait for Redis again, and that a
// later one refused the request (Refused, Done's refusedLater), so that
// earlier ones give back their grants: a request refused by one limit takes
// nothing from the others. Done also gives a grant back when the response
// status matches WithRefund.
//
// # Observing
//
// WithObserver reports each decision and each change of the local fallback
// to an observe.Observer; WithDryRun decides as usual but serves every
// request, so the observer shows what a limit would do before it does.
//
// # Headers
//
// Limited responses carry the IETF draft-10 fields
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// and X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
// (seconds); WithIETFHeaders, WithLegacyHeaders and WithoutHeaders choose
// fewer. A 429 also carries Retry-After, in whole seconds rounded up, so
// never earlier than the real wait, and an RFC 9457 problem+json body of
// type https://iana.org/assignments/http-problem-types#quota-exceeded.
//
// # Writing an adapter
//
// An adapter builds its Policy once, with New, and panics if New fails.
// For each request it calls Decide with a keyfunc.Request of its framework
// and the request's redis-failed flag, sets that flag when
// Decision.RedisFailed, writes the headers with SetHeaders, marks the
// request refused when Refused, gives a Denied request to its deny handler
// and a Failed one's Err to its error handler (LogError by default), and
// answers with Reply's status and body; or, when the status is 0, calls the
// next handler and then Done with the response status and the refused
// mark. The example adapter shows it in about 100 lines.
package policy
