package policy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

func paris(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	return loc
}

// quotaLeft returns what the period has left on the quota limiter name.
func quotaLeft(t *testing.T, c *core.Client, name string, q core.Quota) int64 {
	t.Helper()
	n, err := c.Limiter(name, core.WithQuota(q)).AvailablePermits(context.Background())
	require.NoError(t, err)
	return n
}

// costHeader is a cost function that reads X-Cost, 1 without it.
func costHeader(r keyfunc.Request) (int64, error) {
	if v := r.Header("X-Cost"); v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return 1, nil
}

func TestNewQuotaValidates(t *testing.T) {
	c, _ := mini(t)
	day := core.Quota{Limit: 3, Period: core.Day}
	for _, tc := range []struct {
		q    core.Quota
		opts []policy.Option
		want error
		msg  string
	}{
		{core.Quota{Period: core.Day}, nil, core.ErrInvalidRate, `policy "q": a quota of 0 a day in UTC: core: invalid rate: quota limit 0 not in [1, 4294967295]`},
		{core.Quota{Limit: 1, Period: core.Month + 1}, nil, core.ErrInvalidRate, "unknown quota period Period(4)"},
		{core.Quota{Limit: 1}, nil, core.ErrInvalidRate, "unknown quota period Period(0)"},
		{day, []policy.Option{policy.WithCost(4)}, core.ErrInvalidPermits, `policy "q": WithCost(4): core: invalid permits: the cost must be from 1 to the quota's 3 permits`},
		{day, []policy.Option{policy.WithRateFunc(func(keyfunc.Request) (core.Rate, error) { return core.PerMinute(1), nil })},
			core.ErrInvalidOption, "WithRateFunc: core: invalid option: a rate function chooses a rate's permits, not a quota's"},
		{day, []policy.Option{policy.WithLease(time.Minute)}, core.ErrInvalidOption, "WithLease(1m0s): core: invalid option: a quota holds no slot"},
		{day, []policy.Option{policy.WithTimeout(0)}, core.ErrInvalidOption, "WithTimeout(0s): "},
	} {
		_, err := policy.NewQuota(c, "q", tc.q, tc.opts...)
		require.ErrorIs(t, err, tc.want, tc.msg)
		assert.ErrorContains(t, err, tc.msg)
	}
	_, err := policy.NewQuota(nil, "q", day)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.PanicsWithError(t, `policy "b": a quota of 0 a week in UTC: core: invalid rate: quota limit 0 not in [1, 4294967295]`,
		func() { policy.MustNewQuota(c, "b", core.Quota{Period: core.Week}) })

	// Valid: a cost of the whole limit, refunds, wait mode, the fallback.
	policy.MustNewQuota(c, "edge", day, policy.WithCost(3), policy.WithRefundFailed(), policy.WithWait(time.Second), policy.WithFailLocal(3))

	// One name, one limit: a quota is a kind of its own.
	policy.MustNew(c, "rate", core.PerMinute(3))
	_, err = policy.NewQuota(c, "rate", day)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorContains(t, err, "has the rate 3 per 1m0s (Overall), and this one a quota of 3 a day in UTC")
	fr := core.Quota{Limit: 1000, Period: core.Day, Location: paris(t)}
	policy.MustNewQuota(c, "daily", fr)
	fr2 := fr
	fr2.Location = paris(t) // loaded again: the same zone
	policy.MustNewQuota(c, "daily", fr2)
	for _, other := range []core.Quota{
		{Limit: 999, Period: core.Day, Location: fr.Location},
		{Limit: 1000, Period: core.Week, Location: fr.Location},
		{Limit: 1000, Period: core.Day},
	} {
		_, err = policy.NewQuota(c, "daily", other)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "%+v", other)
	}
	_, err = policy.NewQuota(c, "daily", core.Quota{Limit: 1000, Period: core.Month, Location: fr.Location})
	assert.ErrorContains(t, err, "has a quota of 1000 a day in Europe/Paris, and this one a quota of 1000 a month in Europe/Paris")
	_, err = policy.New(c, "daily", core.PerMinute(1000))
	assert.ErrorContains(t, err, "has a quota of 1000 a day in Europe/Paris, and this one the rate 1000 per 1m0s (Overall)")
	policy.MustNewConcurrency(c, "slots", 2)
	_, err = policy.NewQuota(c, "slots", core.Quota{Limit: 2, Period: core.Day})
	assert.ErrorContains(t, err, "has a concurrency limit of 2, and this one a quota of 2 a day in UTC")
}

// The fields of a quota: q is its limit and w the length of the current
// period (a Day of 23 or 25 hours when clocks change); t runs to the end
// of the period, and a refusal's Retry-After is the time to the boundary,
// rounded up, by Redis's clock.
func TestQuotaHeaders(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	loc := paris(t)
	p := policy.MustNewQuota(c, "daily", core.Quota{Limit: 3, Period: core.Day, Location: loc})
	r := newReq("192.0.2.1:1")

	// An hour before the day that clocks skip an hour of.
	mr.SetTime(time.Date(2026, 3, 28, 23, 0, 0, 0, loc))
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy":      {`"daily";q=3;w=86400`},
		"Ratelimit":             {`"daily";r=2;t=3600`},
		"X-Ratelimit-Limit":     {"3"},
		"X-Ratelimit-Remaining": {"2"},
		"X-Ratelimit-Reset":     {"3600"},
	}, r.resp)
	decide(t, p, r, observe.Allowed, 0)
	mr.SetTime(time.Date(2026, 3, 28, 23, 0, 0, 400e6, loc))
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, `"daily";r=0;t=3600`, r.resp.Get("RateLimit"), "3599.6 s, rounded up")
	d := decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy":      {`"daily";q=3;w=86400`},
		"Ratelimit":             {`"daily";r=0;t=3600`},
		"X-Ratelimit-Limit":     {"3"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"3600"},
		"Retry-After":           {"3600"},
	}, r.resp)
	assert.Equal(t, time.Hour-400*time.Millisecond, d.Result.RetryAfter)
	var body map[string]any
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", body["type"])
	assert.Equal(t, "The request quota of this client for the current day is used up; retry after the time in Retry-After.", body["detail"])
	assert.Equal(t, []any{"daily"}, body["violated-policies"])
	mr.SetTime(time.Date(2026, 3, 28, 23, 59, 59, 999e6, loc))
	decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, "1", r.resp.Get("Retry-After"), "1 ms, rounded up: never early")

	// The boundary, by Redis's clock: a day of 23 hours.
	mr.SetTime(time.Date(2026, 3, 29, 0, 0, 0, 0, loc))
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, `"daily";q=3;w=82800`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, `"daily";r=2;t=82800`, r.resp.Get("RateLimit"))
	// A day of 25 hours.
	mr.SetTime(time.Date(2026, 10, 25, 12, 0, 0, 0, loc))
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, `"daily";q=3;w=90000`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, `"daily";r=2;t=43200`, r.resp.Get("RateLimit"), "noon, and an hour more before midnight")

	// A week and a month, in UTC: February of a leap year.
	week := policy.MustNewQuota(c, "weekly", core.Quota{Limit: 5, Period: core.Week})
	month := policy.MustNewQuota(c, "monthly", core.Quota{Limit: 5, Period: core.Month}, policy.WithIETFHeaders())
	mr.SetTime(time.Date(2028, 2, 28, 0, 0, 0, 0, time.UTC)) // a Monday
	decide(t, week, r, observe.Allowed, 0)
	assert.Equal(t, `"weekly";q=5;w=604800`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, `"weekly";r=4;t=604800`, r.resp.Get("RateLimit"))
	decide(t, month, r, observe.Allowed, 0)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy": {`"monthly";q=5;w=2505600`},
		"Ratelimit":        {`"monthly";r=4;t=172800`},
	}, r.resp)
	for range 4 {
		decide(t, month, r, observe.Allowed, 0)
	}
	d = decide(t, month, r, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, "172800", r.resp.Get("Retry-After"), "until March")
	assert.Contains(t, string(d.Body), "for the current month is used up")
}

// redisNow returns Redis's TIME.
func redisNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// midnightSoon returns a time zone whose next midnight comes within d by
// Redis's clock, on a whole second, and that midnight.
func midnightSoon(t *testing.T, rdb redis.UniversalClient, d time.Duration) (*time.Location, time.Time) {
	t.Helper()
	boundary := redisNow(t, rdb).Add(d).Truncate(time.Second)
	// An offset that puts boundary at 00:00:00, within [-12 h, +14 h].
	off := int((-boundary.Unix()%86_400 + 86_400) % 86_400)
	if off > 14*3600 {
		off -= 86_400
	}
	loc := time.FixedZone("midnight-soon", off)
	y, m, day := boundary.In(loc).Date()
	require.Equal(t, boundary.Unix(), time.Date(y, m, day, 0, 0, 0, 0, loc).Unix())
	return loc, boundary
}

// On a real Redis, a refusal's Retry-After counts down to midnight, never
// early by Redis's clock, and the day after it grants the quota again.
func TestQuotaRetryAfterCountsDownToTheBoundary(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(uniquePrefix(t)), noDenialCache)
	require.NoError(t, err)
	loc, boundary := midnightSoon(t, rdb, 3500*time.Millisecond)
	p := policy.MustNewQuota(c, "soon", core.Quota{Limit: 2, Period: core.Day, Location: loc}, policy.WithTimeout(2*time.Second))
	r := newReq("192.0.2.1:1")
	secs := func(h string) time.Duration {
		n, err := strconv.Atoi(r.resp.Get(h))
		require.NoError(t, err, "%s: %q", h, r.resp.Get(h))
		return time.Duration(n) * time.Second
	}

	granted := 0
	var counted []time.Duration
	for redisNow(t, rdb).Before(boundary.Add(-200 * time.Millisecond)) {
		before := redisNow(t, rdb)
		d := decideAgain(p, r)
		after := redisNow(t, rdb)
		switch {
		case d.Status == 0 && granted < 2:
			granted++
			assert.Equal(t, `"soon";q=2;w=86400`, r.resp.Get("RateLimit-Policy"))
			assert.GreaterOrEqual(t, secs("X-RateLimit-Reset"), boundary.Sub(after), "t runs to the end of the day")
			assert.LessOrEqual(t, secs("X-RateLimit-Reset"), boundary.Sub(before)+time.Second)
		case d.Status == 0:
			require.False(t, after.Before(boundary), "a grant past the quota before midnight by Redis's clock")
		default:
			require.Equal(t, http.StatusTooManyRequests, d.Status)
			require.True(t, before.Before(boundary), "a refusal after midnight by Redis's clock")
			retry := secs("Retry-After")
			assert.GreaterOrEqual(t, retry, boundary.Sub(after), "never early")
			assert.LessOrEqual(t, retry, boundary.Sub(before)+time.Second, "rounded up, not more")
			assert.Equal(t, retry, secs("X-RateLimit-Reset"))
			assert.Equal(t, `"soon";r=0;t=`+strconv.Itoa(int(retry/time.Second)), r.resp.Get("RateLimit"))
			if len(counted) == 0 || counted[len(counted)-1] != retry {
				counted = append(counted, retry)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("Retry-After counted down: %v", counted)
	require.Equal(t, 2, granted)
	require.NotEmpty(t, counted)
	for i := 1; i < len(counted); i++ {
		assert.Less(t, counted[i], counted[i-1], "counts down")
	}

	for redisNow(t, rdb).Before(boundary) {
		time.Sleep(20 * time.Millisecond)
	}
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, `"soon";q=2;w=86400`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, "1", r.resp.Get("X-RateLimit-Remaining"), "a new day")
	assert.InDelta(t, float64(24*time.Hour), float64(secs("X-RateLimit-Reset")), float64(time.Second))
}

// A quota stacked with a rate on one request: a request refused by either
// takes nothing from the other.
func TestQuotaStackedWithARate(t *testing.T) {
	c, _ := mini(t, noDenialCache)
	day := core.Quota{Limit: 2, Period: core.Day}
	rate := policy.MustNew(c, "burst", core.PerMinute(3))
	quota := policy.MustNewQuota(c, "daily", day)
	r := newReq("192.0.2.1:1")
	chain := func(ps ...*policy.Policy) int {
		r.reset()
		var ds []policy.Decision
		status := 0
		for _, p := range ps {
			d := p.Decide(r)
			ds = append(ds, d)
			if status = d.Status; status != 0 {
				break
			}
		}
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Status == 0 {
				ds[i].Done(http.StatusOK)
			}
		}
		return status
	}
	for i, want := range []int{0, 0, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		require.Equal(t, want, chain(rate, quota), "request %d", i+1)
	}
	assert.Equal(t, `"burst";q=3;w=60, "daily";q=2;w=86400`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, "2", r.resp.Get("X-RateLimit-Limit"), "the quota refused")
	assert.EqualValues(t, 1, available(t, c, "burst:192.0.2.1", core.PerMinute(3)), "the rate kept only the requests served")
	assert.Zero(t, quotaLeft(t, c, "daily:192.0.2.1", day))

	// The quota first: the rate refuses, and the quota keeps only the
	// requests served.
	week := core.Quota{Limit: 5, Period: core.Week}
	weekly := policy.MustNewQuota(c, "weekly", week)
	slow := policy.MustNew(c, "slow", core.PerMinute(2))
	for i, want := range []int{0, 0, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		require.Equal(t, want, chain(weekly, slow), "request %d", i+1)
	}
	assert.Equal(t, "2", r.resp.Get("X-RateLimit-Limit"), "the rate refused")
	assert.EqualValues(t, 3, quotaLeft(t, c, "weekly:192.0.2.1", week), "the quota kept only the requests served")
}

// Done gives back exactly a request's grant when a refund rule matches,
// and settles it to the real cost: above the reservation, past the limit,
// a debt that refuses the key's requests until the period ends.
func TestQuotaRefundsAndSettles(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	mr.SetTime(time.Date(2026, 5, 31, 22, 0, 0, 0, time.UTC))
	month := core.Quota{Limit: 10, Period: core.Month}
	p := policy.MustNewQuota(c, "tokens", month, policy.WithCostFunc(costHeader), policy.WithRefundFailed())
	r := newReq("192.0.2.1:1")

	for range 3 {
		decide(t, p, r, observe.Allowed, 0).Done(http.StatusBadGateway)
	}
	assert.EqualValues(t, 10, quotaLeft(t, c, "tokens:192.0.2.1", month), "failed requests given back")

	d := decide(t, p, r.with("X-Cost", "4"), observe.Allowed, 0)
	require.NoError(t, p.Settle(r.Context(), 1))
	d.Done(http.StatusOK)
	assert.EqualValues(t, 9, quotaLeft(t, c, "tokens:192.0.2.1", month), "settled to 1 of the 4 reserved")

	d = decide(t, p, r.with("X-Cost", "2"), observe.Allowed, 0)
	require.NoError(t, p.Settle(r.Context(), 15))
	d.Done(http.StatusOK)
	assert.Zero(t, quotaLeft(t, c, "tokens:192.0.2.1", month), "in debt: 16 used of 10")
	d = decide(t, p, r.with("X-Cost", "1"), observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, 2*time.Hour, d.Result.RetryAfter, "until June")
	assert.Equal(t, "7200", r.resp.Get("Retry-After"))
	mr.SetTime(time.Date(2026, 6, 30, 23, 59, 59, 0, time.UTC))
	d = decide(t, p, r, observe.Allowed, 0)
	assert.EqualValues(t, 9, d.Result.Remaining, "the debt ended with May")
	assert.Equal(t, `"tokens";q=10;w=2592000`, r.resp.Get("RateLimit-Policy"))
}

// While Redis fails, each process grants a key up to its share of what
// Redis last said the key's period had left, until that period ends, and
// a key it has no decision of its share of the whole limit; what it grants
// is counted in Redis once it answers.
func TestQuotaFallbackShare(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	mr.SetTime(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	day := core.Quota{Limit: 10, Period: core.Day}
	obs := &counter{}
	p := policy.MustNewQuota(c, "daily", day, policy.WithFailLocal(3), policy.WithObserver(obs),
		policy.WithKey(keyfunc.Header("X-Key")), policy.WithCostFunc(costHeader))
	req := func(key string) *req { return newReq("192.0.2.1:1").with("X-Key", key) }
	a := req("a")
	for range 4 {
		decide(t, p, a, observe.Allowed, 0)
	}

	mr.SetError("LOADING Redis is loading")
	for i := range 2 { // ceil(6 / 3)
		d := decide(t, p, a, observe.FallbackAllowed, 0)
		assert.EqualValues(t, 1-i, d.Result.Remaining)
	}
	d := decide(t, p, a, observe.FallbackDenied, http.StatusTooManyRequests)
	assert.InDelta(t, 12*time.Hour, d.Result.RetryAfter, float64(time.Second), "until midnight")
	retry := a.resp.Get("Retry-After")
	assert.Contains(t, []string{"43199", "43200"}, retry, "until midnight")
	assert.Equal(t, `"daily";q=10;w=86400`, a.resp.Get("RateLimit-Policy"))
	assert.Equal(t, `"daily";r=0;t=`+retry, a.resp.Get("RateLimit"))

	b := req("b") // no decision of Redis: ceil(10 / 3)
	for range 4 {
		decide(t, p, b, observe.FallbackAllowed, 0)
	}
	decide(t, p, b, observe.FallbackDenied, http.StatusTooManyRequests)
	big := req("big").with("X-Cost", "6") // above the share: granted alone
	decide(t, p, big, observe.FallbackAllowed, 0)
	decide(t, p, big.with("X-Cost", "1"), observe.FallbackDenied, http.StatusTooManyRequests)
	obs.mu.Lock()
	assert.Equal(t, []bool{true}, obs.transitions, "the fallback started, once")
	obs.mu.Unlock()
	errs := obs.errs()
	require.Len(t, errs, 3+5+2, "the observer sees why Redis did not decide each decision in memory")
	for _, err := range errs {
		assert.ErrorIs(t, err, core.ErrUnavailable)
	}

	mr.SetError("")
	require.Eventually(t, func() bool {
		return decideAgain(p, req("probe")).Outcome == observe.Allowed
	}, 5*time.Second, 50*time.Millisecond, "Redis decides again")
	require.Eventually(t, func() bool {
		return quotaLeft(t, c, "daily:a", day) == 4 && quotaLeft(t, c, "daily:b", day) == 6 && quotaLeft(t, c, "daily:big", day) == 4
	}, 5*time.Second, 50*time.Millisecond, "the local grants are counted in Redis")
}

// A key's share lasts until the end of the period Redis gave; then the
// fallback grants a share of the next period's whole limit.
func TestQuotaFallbackShareEndsWithThePeriod(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	// Redis's clock stands still at 1.5 s before midnight; the local one
	// runs on.
	mr.SetTime(time.Date(2026, 7, 1, 23, 59, 58, 500e6, time.UTC))
	day := core.Quota{Limit: 4, Period: core.Day}
	p := policy.MustNewQuota(c, "daily", day, policy.WithFailLocal(2), policy.WithCost(4))
	r := newReq("192.0.2.1:1")
	end := time.Now().Add(1500 * time.Millisecond) // no later than the end the fallback counts to
	decide(t, p, r, observe.Allowed, 0)
	mr.SetError("LOADING Redis is loading")
	d := decide(t, p, r, observe.FallbackDenied, http.StatusTooManyRequests)
	assert.LessOrEqual(t, d.Result.RetryAfter, 1500*time.Millisecond)
	assert.Contains(t, []string{"1", "2"}, r.resp.Get("Retry-After"))
	var granted time.Time
	require.Eventually(t, func() bool {
		d := decideAgain(p, r)
		if d.Outcome == observe.FallbackAllowed {
			granted = time.Now()
			return true
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	assert.False(t, granted.Before(end), "not before the period's end")
	assert.Equal(t, `"daily";q=4;w=86400`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, "0", r.resp.Get("X-RateLimit-Remaining"), "a whole limit above the share of 2, granted alone")
	decide(t, p, r, observe.FallbackDenied, http.StatusTooManyRequests)
}

// In wait mode a request over the quota waits only when the boundary
// comes within its maximum wait: a monthly quota's request never waits.
func TestQuotaWait(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	long := policy.WithWait(20 * time.Second)
	loc, _ := midnightSoon(t, rdb, 2500*time.Millisecond)
	short := policy.MustNewQuota(c, "short", core.Quota{Limit: 1, Period: core.Day, Location: loc}, policy.WithWait(100*time.Millisecond),
		policy.WithTimeout(2*time.Second))
	monthly := policy.MustNewQuota(c, "monthly", core.Quota{Limit: 1, Period: core.Month}, long)
	r := newReq("192.0.2.1:1")
	for _, p := range []*policy.Policy{short, monthly} {
		decide(t, p, r, observe.Allowed, 0)
		start := time.Now()
		decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
		assert.Less(t, time.Since(start), 5*time.Second, "refused at once: the boundary is further than the wait")
	}

	loc, boundary := midnightSoon(t, rdb, 2500*time.Millisecond)
	daily := policy.MustNewQuota(c, "daily", core.Quota{Limit: 1, Period: core.Day, Location: loc}, long,
		policy.WithTimeout(2*time.Second))
	decide(t, daily, r, observe.Allowed, 0)
	if !redisNow(t, rdb).Before(boundary.Add(-500 * time.Millisecond)) {
		t.Logf("too slow to see a wait: midnight came during the first decision")
		return
	}
	decide(t, daily, r, observe.WaitedAllowed, 0)
	assert.False(t, redisNow(t, rdb).Before(boundary), "granted once the day ended, by Redis's clock")
}

// A flood of 100 000 distinct keys while the fallback decides a quota
// keeps the process's live heap under the bound of the rate's fallback:
// 100 000 keys and 100 000 grants kept for Redis, of at most 256 bytes
// each.
func TestQuotaFallbackKeyFloodIsBounded(t *testing.T) {
	c, mr := mini(t)
	p := policy.MustNewQuota(c, "flood", core.Quota{Limit: 5, Period: core.Day},
		policy.WithKey(func(r keyfunc.Request) (string, error) { return r.Header("X-Key"), nil }))
	mr.SetError("LOADING Redis is loading")
	before := liveHeap()
	r := newReq("192.0.2.1:1")
	for i := range 100_000 {
		d := decideAgain(p, r.with("X-Key", "client-"+strconv.Itoa(i)))
		require.Equal(t, observe.FallbackAllowed, d.Outcome)
	}
	grew := liveHeap() - before
	bound := int64(100_000 * (256 + 256))
	t.Logf("live heap grew by %d bytes for 100 000 keys in a quota's fallback and their grants kept for Redis (bound %d)", grew, bound)
	assert.Less(t, grew, bound)
	runtime.KeepAlive(p)
}
