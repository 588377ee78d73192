// Package core is a distributed rate limiter on Redis, with a semaphore of
// leased permits beside it (see Semaphores). It runs the algorithm
// of Redisson's RRateLimiter, a sliding-window log, and keeps its Redis
// layout byte for byte, so Java services using Redisson and Go services
// using this package can share one limiter. It also counts calendar
// quotas (see Quotas).
//
// # Algorithm
//
// A Rate allows Permits per Interval over a sliding window: a permit granted
// at time T counts against the limit while now - Interval < T and comes back
// at T + Interval. Each decision is one Lua script, one round trip: it moves
// the permits that left the window back into a counter, then either grants
// (recording the grant in a log) or reports when the requested permits will
// be back, read from the oldest grants of the log: never early, and exact
// but in the case that Cost describes. Time is Redis server TIME, never the
// caller's clock.
//
// # Redis layout
//
// For a limiter named N (after the Client's optional key prefix):
//
//	N                       hash: rate, interval (ms), type (0 Overall, 1 PerClient), keepAliveTime (ms)
//	{N}:value               string: permits available now
//	{N}:permits             sorted set: one member per grant, scored with its grant time in ms
//	{N}:value:<clientID>    the same two, per client, for PerClient limiters
//	{N}:permits:<clientID>
//
// When N already contains a {hash tag}, the suffixed keys are N:value and so
// on. All keys of a limiter share one Redis Cluster slot. A log member is 21
// bytes: 0x10, a 16-byte random id, the permit count as a little-endian
// uint32, as Redisson writes it.
//
// # Differences from Redisson
//
// Where Redisson is wrong, this package is right, on the same keys:
//   - decisions use Redis TIME, so client clocks cannot skew the window;
//   - the retry time is when the permits come back, never early, not
//     "oldest entry + 3 ms";
//   - Release removes the grants it gives back, so they are not credited
//     again when they would have expired, and the counter never exceeds
//     the rate;
//   - every key a script writes gets a TTL (the keepAlive, else the config's
//     TTL, else one interval for the state keys), so no key is left behind;
//   - a missing or stale counter is rebuilt from the log instead of being
//     reset to the full rate, and an empty log never makes a script fail;
//   - permits below 1, zero intervals and garbage in Redis are typed errors:
//     a key of another type, or a stored interval beyond the longest
//     time.Duration, is ErrInvalidConfig for that limiter alone;
//   - a resent acquire (after a lost reply) never consumes twice while its
//     first grant is in the window (see Idempotency);
//   - a rate given in code (WithRate) is created or updated inside the
//     decision itself: no "not initialized" race and no extra round trip;
//   - TryAcquireWithin returns at once when the wait cannot fit.
//
// A Redisson client still stamps its own grants with its own clock.
//
// # Idempotency
//
// Each acquire carries a log member with a random id, chosen by the
// caller. When go-redis resends a script whose reply was lost, the resend
// finds its member in the log and reports the grant without taking the
// permits again. The log remembers a grant only while it is in the window:
// a resend that reaches Redis one Interval or more after the first grant
// takes the permits again. Release is not idempotent; Refund (a Settle to
// 0 permits), Settle and Charge are, within the window: each names the
// grant it acts on, so what the Client keeps for Redis and sends again (see
// Settling and debts) is made once.
//
// # Settling and debts
//
// Limiter.Settle changes a grant to the permits the work it paid for really
// took (the tokens of a completion, the bytes of an export), once, keeping
// the grant's time: fewer give the difference back, more charge it, even
// past the rate. Limiter.Charge records grants made without Redis, such as
// a local fallback's while Redis could not decide: each is the Grant that a
// failed call returned in its Result, and is written into the log at the
// time of that call, past the rate if need be; a grant already in the log
// (the call's script ran after all) counts once. A window over its rate is
// a debt: acquires are denied, with 0 remaining and a retry time never
// early, until the grants that make it leave the window, one Interval after
// their time at most. A Redisson client sees a debt as negative available
// permits, and is denied too.
//
// Charge does no I/O. The Client keeps what it owes Redis in a ledger: the
// charges, the refunds and settles it could not make (Redis failed or
// answered too late, or the call was not sent), and the refunds of grants
// whose acquire got no answer, which wait min(2 s, half the window) so
// that they come after a script that runs late. The changes of one grant
// go in their order, and none goes while an earlier one may still run (a
// payment that got no answer in time holds its grant's next change for a
// second), so that a late charge never writes back a grant that was given
// back; a refund or settle of a grant Redis decided follows what the
// Client still owes on that grant, and a grant given back is not written
// into a promoted master. A limiter's next call pays
// what it owes first, in the same round trip, so the first request after
// an outage is still one round trip; the Client's own writer goroutine
// pays what no call takes within about 100 ms, and, while Redis fails,
// once a second, as its probe. The ledger keeps at most 100 000 changes,
// the oldest dropped first, and drops a change once its grant's window has
// passed, when it no longer counts.
//
// # When Redis fails
//
// Calls fail without a decision for one of three reasons, which the errors
// tell apart:
//   - ErrOverloaded: the call never left this process: too many calls were
//     waiting for a round trip (WithMaxQueue), or its deadline came while
//     it waited and Redis went on answering other round trips. This
//     process's load, not Redis's failure;
//   - the context's error (context.DeadlineExceeded) without
//     ErrUnavailable: the call was sent and got no answer in its caller's
//     time; its script may still run, late. Once a round trip came late,
//     the next ones go on after their callers return, waiting up to a
//     second for Redis's answer: an answer late for its caller tells that
//     Redis is well and this process was busy, and none, that it fails;
//   - ErrUnavailable: Redis is failing. A round trip failed as a whole (a
//     network error, or Redis refusing to decide: a read-only replica,
//     loading, authentication or permission refused, memory full (OOM),
//     scripting disabled), and its calls got an error wrapping
//     ErrUnavailable at once; or it got no answer in time while a dial to
//     its Redis was refused (seen by a go-redis dial hook on single-node
//     and Sentinel clients, or by a dial of the Client's own, at most every
//     100 ms), which is Redis failing from that first call; or it got no
//     answer a second past its callers' deadlines, and Redis answered
//     nothing else within another second. An Outage of that server begins
//     (a Cluster master, a Sentinel client's master, the server of a
//     single-node client), which the calls' errors wrap with
//     ErrUnavailable: the Client fails the calls on that server's keys at
//     once, and no other server's, and probes it on its own once a second;
//     the first answer ends the Outage (its Done channel is closed).
//
// A Redis Cluster moving a slot is no failure: go-redis follows MOVED and
// ASK, a script call answered TRYAGAIN is sent again within its timeout,
// and a script declares only the keys it touches (three for a rate given
// in code), so a moving slot is served where the limiter's keys are. When
// the Client sees a limiter's master change (a Sentinel client dials a new
// master; a Cluster slot's master is another node after a round trip), it
// charges the grants it made in their window, its last 16 384, into the new
// master, which skips those it holds: the writes a planned switch-over
// loses with the old master are made again.
//
// An error of one limiter's keys is no failure of Redis's: a key of
// another type under its name, or a stored rate that is not valid, fails
// that limiter's callers with ErrInvalidConfig, and the limiters decided in
// the same round trip are decided as usual.
//
// A failed TryAcquire returns, in Result.Grant, the grant it asked for: a
// caller that grants the permits by other means passes it to Charge, and
// the Client writes it once Redis answers again, so that Redis counts
// those permits, once.
//
// Client.Check, called at start, reports what keeps Redis from deciding,
// and what to do: Redis unreachable, a password required or refused, a
// permission missing, a read-only replica, Redis loading its data, or
// scripting disabled. It changes nothing: a Client decides as soon as Redis
// answers.
//
// # Quotas
//
// A limiter given WithQuota counts a Quota instead of a rate: Limit
// permits per calendar Period (a Day, an ISO Week from Monday, a Month) in
// the quota's time zone, so that a Day is 23 or 25 hours when its clocks
// change and a Month is as long as the calendar says. Redis's clock
// decides the period: the Client computes the periods of the time zone
// and sends a call with the one that holds its estimate of Redis's time;
// a script that finds Redis's time outside it writes nothing and answers
// with that time, and the call is sent again in Redis's period. A
// refusal's RetryAfter is the time until the next period begins.
//
// A quota's limiter keeps one string in Redis, whatever its limit:
//
//	{N}:quota    "<period start, Unix ms>:<permits counted>:<its last six grants>"
//
// (N:quota when N has a {hash tag}), about 180 bytes of Redis memory
// (MEMORY USAGE, for a 32-byte name) however many grants it counted. It
// expires a minute after its period ends, and a counter of a period that
// has ended counts as zero. The acquire, refund, settle or charge that
// changes it is one script call, which reads it first: a key of another
// type, or a string that no limiter wrote, fails that limiter's calls
// with ErrInvalidConfig, and is left as it is.
//
// A counter in constant memory cannot remember every grant, so a quota's
// idempotency is bounded. The counter remembers the last six grants of
// its period (a 6-byte id and the permits of each, and whether it was
// settled): a resend of an acquire, settle, refund or charge of one of
// them changes nothing more; one that reaches Redis after six later grants
// counts again. A refund or settle of a grant that the counter no longer
// remembers is made, once its acquire was answered, and the grant is
// remembered as settled; that of a grant whose acquire got no answer is
// made only if the counter remembers the grant, since the acquire may
// never have run: the refund of such a grant after six later grants is
// lost, and the quota counts it. A charge counts unless the counter
// remembers its grant. Refund, Settle and Charge change the count of
// their grant's period while it is current, past the limit if need be (a
// debt that refuses every acquire until the period ends); the Client's
// ledger keeps what it owes a quota as it does a rate's, and drops it
// when its period ends. Release is not idempotent. Unlike a rate's, a
// quota's grants are not written into a new master after a failover: the
// grants that had not reached its replica are not counted there.
//
// # Cost
//
// A decision is one round trip. A grant on a limiter with an Overall rate
// in code runs four Redis commands in its script (TIME, HMGET, DECRBY and
// ZADD), whatever the rate, while no grant has left the window since the
// limiter's last one and no TTL is due: its config hash holds when either
// is next (exitAt and renewAt, which Redisson does not read). Otherwise
// one ZRANGE reads the oldest grants, and those that left the window are
// given back in the INCRBY that takes the permits. A denial leaves the
// keys as they were (on that path, an INCRBY undoes the DECRBY). A grant
// renews the keys' TTLs when due, so every key lives at least one interval
// past each grant (after which an idle limiter is full again, as if new)
// and at most KeepAlive past the last one. The first decision of a new
// limiter is one round trip too.
//
// A decision's work does not grow with the log. A call gives back at most
// 1 000 grants that left the window, the rest on later calls (a denial
// meanwhile says to retry in 1 ms). A denial reads the oldest 16 grants,
// once per limiter and script call, and, when they do not hold the permits
// it needs, the one grant at the rank where those would be back if every
// later grant held one permit: every grant holds at least one, so its
// retry time is never early. It is exact when the permits come back within
// those 16 grants or the grants hold one permit each, and otherwise no
// later than the time until the grant at rank need-1 (the oldest being
// rank 0, need the permits missing) leaves the window.
//
// Two things keep Redis out of the way:
//   - the local denial cache (WithDenialCache, defaultDenialCache limiters,
//     the least recently used going first): a request denied by Redis is
//     denied again from memory (Result.Cached), with no round trip, until
//     the time Redis gave, and so is a request for more permits on the
//     limiter at the same rate, told to retry when every permit is back; a
//     request at another rate asks Redis. An abusive client costs Redis
//     nothing, whatever the permits it asks for;
//   - coalescing (WithCoalescing): when all round trips in flight are busy,
//     concurrent decisions share the next one as a pipeline, and the
//     acquires on one limiter among them share one script call, which reads
//     the config, the clock and the log once and adds a log member per
//     grant; a lone caller still makes its own round trip at once. A
//     tracer learns which callers each round trip carries through
//     WithRoundTripHook.
//
// A log entry costs Redis about 120 bytes, as in Redisson: a full window of
// 100 000 permits is about 12 MB.
//
// # Semaphores
//
// Client.Semaphore returns a Semaphore: at most its permits held at once,
// each by a lease that ends, by Redis's clock, unless it is renewed, so
// that a process that dies holds its permits one lease at most. It keeps
// the layout of Redisson's RPermitExpirableSemaphore, so Java and Go
// services share one semaphore. For a semaphore named N:
//
//	N                  string: the permits available now
//	{N}:timeout        sorted set: one member per permit held, its 16-byte
//	                   random id, scored with its lease's end in Unix ms
//	redisson_sc:{N}    the channel on which the permits available are
//	                   published when they come back
//
// (N:timeout and redisson_sc:N when N has a '{'). The limit is the
// counter plus the permits held: WithPermits gives it in code, and each
// call then creates the semaphore or brings it back to that limit.
//
// Each call is one script call, through the round trips of the limiters'
// decisions, with their timeouts, failure handling and coalescing. Each
// takes back the permits whose lease ended, by Redis's TIME, before it
// decides. TryAcquire never waits; TryAcquireWithin waits for permits,
// woken by the releases published on the channel (which the Client
// subscribes while it has waiters on it), by the end of the lease it waits
// for, or by a poll four times a second. A call resent after a lost reply
// takes nothing twice (the permits' ids come from the caller); Release and
// Renew may be sent twice. Renew never refuses: it holds again the permits
// Redis no longer has (restarted empty, or a lease a fallback granted when
// TryAcquire failed), past the limit if need be, a debt that later
// acquires wait out. Every write gives both keys a TTL, the longest lease
// held plus 10 s, so an idle semaphore's keys expire; but a semaphore
// without WithPermits, whose counter has no TTL (as Redisson's
// trySetPermits writes it), keeps its keys, its only record of the limit.
// A key of another type under its names is ErrInvalidConfig for that
// semaphore alone. The repository's docs/redisson.md tells what is shared
// with Redisson and where this package differs.
//
// # Usage
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	client, err := core.New(rdb)
//	if err != nil { ... }
//	limiter := client.Limiter("api:user:42", core.WithRate(core.PerMinute(100)))
//	res, err := limiter.TryAcquire(ctx, 1)
//	switch {
//	case err != nil: // no decision: see When Redis fails; or a bad argument
//	case !res.Allowed: // over the limit: retry after res.RetryAfter
//	}
//
// A denial is a Result with Allowed false, not an error. Errors are the
// package's sentinels (test them with errors.Is) or Redis and context errors
// wrapped with %w.
//
// Clients and Limiters are safe for concurrent use by multiple goroutines.
package core
