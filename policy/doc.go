// Package policy builds limits on requests once, for every framework: a
// rate (New), a number of requests in flight (NewConcurrency) or a quota
// per calendar period (NewQuota). A Policy
// is one named limit: who is limited (a key function), how many
// requests at what cost, whether a request over the limit waits, what
// happens when Redis cannot decide, which headers responses carry, and who
// observes it. The middleware packages apply a Policy, and only translate
// their framework's request and response: ginrl (gin), echorl (echo v4),
// echo5rl (echo v5), fiberrl (fiber v2), fiber3rl (fiber v3), nethttprl
// (net/http, chi and other routers built on it) and grpcrl (gRPC server
// interceptors); echo5rl, fiber3rl and grpcrl are modules of their own.
//
//	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))
//	r.Use(ginrl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	r.POST("/login", ginrl.New(login), handleLogin)
//
// # Names and limiter names
//
// The name given to New is the limit's identity: policies of one name on
// one core.Client share one budget, and New fails when two of them have
// different rates or missing-key choices. A request's limiter name is the
// Client's key prefix, the policy name, ':' and the request's key (package
// keyfunc), the name and the key each escaped with keyfunc.Escape, so that
// no client-chosen value can forge another key, break a Redis Cluster hash
// tag, or put a raw API key into Redis. With the policy "api" and the
// default key, the client IP, a client at 192.0.2.1 is limited under
// "api:192.0.2.1".
//
// # Nothing turns limiting off by accident
//
// Only WithFailOpen, when Redis fails, and WithMissingKeyServe, which you
// choose, serve a request without a decision; a busy process never does.
// Every other failure has a safe answer, and its error is reported
// (Decision.Err, which adapters pass to their error handler or log with
// LogError, or the policy's logger, WithLogger; and the observer):
//
//   - a key function that finds no key (an error wrapping keyfunc.ErrNoKey,
//     or an empty key), fails, or cannot know the route
//     (keyfunc.ErrRouteUnknown): the missing-key rule. By default the
//     request is limited by its client IP in a namespace of its own, the
//     limiter "<name>::ip:<address>", which no key can reach
//     (WithMissingKeyIP); WithMissingKeyDeny answers 403 instead, and
//     WithMissingKeyServe serves such requests without a limit;
//   - a rate function that fails, returns an invalid rate, or returns a
//     rate of another interval or type than the policy's (which would
//     change the limiter's window and erase its history: a rate function
//     chooses the permits only): the policy's own rate;
//   - a cost function that fails or returns a cost below 1: 400, the
//     client's mistake; a cost above the rate: 413, since the request
//     could never be served;
//   - an error of the limiter's keys in Redis, which is not Redis failing
//     (a key of another type under the limiter's name, core.ErrInvalidConfig),
//     or any other such error: decided in memory at the process's share,
//     under every failure policy.
//
// # Wait mode
//
// With WithWait, a request over the limit waits for a permit, but only when
// the time until the permit comes back fits in both the maximum wait and
// what is left of the request's own deadline; otherwise it is rejected at
// once. Waiters on one key take turns, first come first served, and a
// request joins only when its turn can come in time, counting the permits
// the waiters ahead of it need at the rate. A client that goes away ends
// its wait. At most WithMaxWaiters requests wait at once in one policy, and
// WithMaxWaitersPerKey on one key; beyond that they are rejected.
//
// # When Redis cannot decide
//
// Each Redis round trip has a timeout (100 ms by default). When Redis is
// down or slow, by default (WithFailLocal) each process decides in memory,
// at its share of the rate, with the same keys, headers and 429s;
// WithFailOpen serves requests while Redis fails; WithFailClosed answers
// 503. No decision hangs a request, and no error text reaches a response.
//
// The local fallback starts, once (the observer's Fallback), when the
// core says that Redis fails (core.ErrUnavailable, and the core.Outage of
// the server that fails: on a Redis Cluster, one master, whose keys alone
// are decided in memory). It ends, once, when the last outage it met ends,
// the Client's probe having found the server again; each outage is logged
// once when it starts and once when it ends. What the fallback granted is charged to the core
// (core.Limiter.Charge, which does no I/O): the Client writes each grant
// into the limiter's log in Redis at its own time, even past the rate (a
// debt that later requests pay by waiting), with the limiter's first call
// once Redis answers, in the same round trip, or from a goroutine of its
// own. Refunds and settles that could not be made are kept by the Client
// the same way, and made when Redis can take them (see core's Settling and
// debts).
//
// This process's own load is no Redis failure, and does not start the
// fallback: a call that was never sent (core.ErrOverloaded) is decided in
// memory, or, under fail open or closed, shed with a 429; a call sent and
// answered too late for its request is decided in memory under its own
// grant, under fail open too (under fail closed it gets a 503), so that
// its script, should it run late, and a local grant count once, and a
// request refused meanwhile gives that grant back. In wait mode, a request
// in either case asks again within its maximum wait. A client that goes
// away does not end the round trip that decides its request, which Redis
// decides all the same; it ends a wait, and what the wait's call asked is
// given back.
//
// # Requests in flight
//
// NewConcurrency limits the requests of each key that run at once: a
// request takes a slot, a permit of a core.Semaphore held by a lease,
// before its handler runs, and gives it back when Done is called, which
// adapters do when the handler returns, when it panics (as a 500), and,
// for a connection the handler handed over to be served after it returned
// (fasthttp's Hijack, as fiber's WebSockets do), when that closes. While
// the request runs, its lease (WithLease, 30 s by default) is renewed
// every third of it, so a process that dies holds its slots one lease at
// most, by Redis's clock. In wait mode a request over the limit waits,
// first come first served, until a slot is given back (the semaphore's
// channel says so; a lease that ends says nothing, and a waiter asks Redis
// four times a second at most), or its wait or deadline ends.
//
// When Redis cannot decide, the local fallback counts the slots this
// process holds on the key, those Redis granted included, against the
// process's share of the limit. A slot granted so is held in Redis as soon
// as it answers (a renewal holds what Redis does not), and when an outage
// ends every slot held is renewed at once, and again two seconds later;
// meanwhile a slot must fit both Redis's count and the process's share, so
// that the other processes' holders, whose probes find Redis within a
// second, register theirs first. A Redis restarted empty thus learns what
// is held within a renewal: at worst, when this process saw no failure, a
// third of the lease.
//
// # Quotas
//
// NewQuota gives each key a budget per calendar period: a core.Quota of
// Limit permits a Day, an ISO Week or a Month, in the calendar of its time
// zone, so that a Day is 23 or 25 hours long when clocks change. Redis's
// clock decides the period, and each key is one counter in Redis, of
// constant size, that expires after its period (core.WithQuota).
//
//	monthly := policy.MustNewQuota(client, "monthly", core.Quota{Limit: 1_000_000, Period: core.Month}, byUser)
//
// A refusal's Retry-After and t are the time until the next period begins,
// rounded up, and w in RateLimit-Policy is the current period's length in
// seconds. Costs, Settle (a debt lasts until the period ends), refunds,
// stacking, dry run, wait mode (a request waits only when the boundary is
// within its wait) and the failure policies work as for a rate. The local
// fallback grants each key this process's share of what the period had
// left when Redis last decided the key (ceil(left/instances)), until the
// period ends; a key without such a decision, the share of the whole limit
// (see NewQuota).
//
// # Settling the real cost
//
// A request whose cost is known only once it ran (the tokens of a
// completion, the bytes of an export) reserves a cost with WithCost or
// WithCostFunc, and its handler reports the real one with Settle. When the
// handler returns, Done settles the request's grant to it, once (core's
// Limiter.Settle): fewer permits give the difference back, more charge the
// difference, even past the rate, a debt that the client's next requests
// pay by waiting. A request given back by a refund rule or a later limit's
// refusal is not settled. The headers, sent before the handler ran, show
// the reservation. Settle returns an error wrapping core.ErrInvalidPermits
// for a count below 0 or above core.MaxPermits, and changes nothing.
//
// # The limits of one request
//
// Several policies may limit one request (a global limit and a route's).
// The first one applied to a request keeps what they share in the
// request's context. Once a round trip to Redis got no answer in time, the
// later ones that do not wait are held to the deadline it missed, so they
// decide without Redis and the request answers within one timeout (once
// Redis is known to fail, the core fails their calls at once, but for its
// probe). When a later one refuses the request, the earlier ones give
// their grants back (Decision.Done), so it takes nothing from them: each
// such request costs an earlier limiter a script call to take its grant
// and one to give it back. The response carries every policy's RateLimit
// item and the X-RateLimit-* headers of the policy that refused it, or
// else of the one with the fewest permits left; ResultFrom gives that
// decision to a deny handler and to the handler of a request served. Done
// also gives a grant back when the response status matches WithRefund,
// and otherwise settles it to the cost reported with Settle, if any.
//
// # Headers
//
// Limited responses carry the fields of the IETF draft "RateLimit header
// fields for HTTP" (draft-ietf-httpapi-ratelimit-headers-11)
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// and X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
// (seconds); WithIETFHeaders, WithLegacyHeaders and WithoutHeaders choose
// fewer. t and X-RateLimit-Reset are the seconds until the request could be
// granted on a refusal, and until the quota is full again (every permit
// given so far back) otherwise. A 429 also carries Retry-After, in whole
// seconds rounded up, so never earlier than the real wait, and an RFC 9457
// problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded.
//
// # Operating limits
//
// An operator sees and changes a policy's state in Redis, by key, as the
// key functions return it: Peek (what the key's next request would get,
// taking nothing), Reset, Keys, and SetOverride, Override and
// DeleteOverride (a key's own limit, which every process applies within a
// second). A policy marshals to JSON as its name, kind and limit. Package
// admin serves all of it as a JSON API, and the redlimit command
// (cmd/redlimit) from a shell.
//
// # Writing an adapter
//
// An adapter takes a *Policy and options of its own (a skip function, a
// deny handler, an error handler). For each request it calls Decide with an
// Exchange of its framework; reports Decision.Err, when not nil, to its
// error handler, or else with LogError; answers a Decision whose Status is
// not 0 with that status and Body, or with its deny handler for a 429; and
// otherwise calls the next handler and then Done with the response status.
// The example shows one in under 100 lines.
package policy
