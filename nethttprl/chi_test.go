package nethttprl_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// chiLimit is a policy "route" keyed by keyfunc.Route, 2 requests a
// minute, on a Client of its own key prefix, applied by nethttprl. A chi
// pattern carries no method: one key serves every method of a route.
type chiLimit struct {
	mw     func(http.Handler) http.Handler
	errs   []error // what the policy reported, in order
	rdb    *redis.Client
	prefix string
}

func newChiLimit(t *testing.T, opts ...policy.Option) *chiLimit {
	t.Helper()
	l := &chiLimit{rdb: redistest.Shared(t).Client(t), prefix: "chi" + strconv.FormatUint(rand.Uint64(), 36) + ":"}
	c, err := core.New(l.rdb, core.WithKeyPrefix(l.prefix))
	require.NoError(t, err)
	p := policy.MustNew(c, "route", core.PerMinute(2), append([]policy.Option{policy.WithKey(keyfunc.Route())}, opts...)...)
	l.mw = nethttprl.New(p, nethttprl.WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, err error) {
		l.errs = append(l.errs, err)
	}))
	return l
}

// limiters returns the names of the limiters in Redis under l's prefix,
// sorted: the names of their config hashes, whose keys are the prefix and
// the name (the other keys of a limiter begin with '{').
func (l *chiLimit) limiters(t *testing.T) []string {
	t.Helper()
	keys, err := l.rdb.Keys(context.Background(), l.prefix+"*").Result()
	require.NoError(t, err)
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, l.prefix)
	}
	slices.Sort(keys)
	return keys
}

// routeLimiter is the limiter name of requests whose route key is route.
func routeLimiter(route string) string { return "route:" + keyfunc.Escape(route) }

func chiOK(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// statuses sends each request, "METHOD /path", to h from one client
// (httptest's 192.0.2.1) and returns the statuses.
func statuses(h http.Handler, requests ...string) []int {
	var got []int
	for _, r := range requests {
		method, path, _ := strings.Cut(r, " ")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		got = append(got, w.Code)
	}
	return got
}

// Under chi, a nethttprl middleware keys on the route pattern wherever chi
// has routed the request before it runs: inline middleware (r.With, or Use
// inside r.Group) and handlers wrapped by hand, in the root router, in a
// sub-router made with r.Route, or in a router given to r.Mount. Chi sets
// Request.Pattern (v5.2.3 and later; the full pattern of a sub-router's
// route, prefix included, since v5.3.0) in its routing step, which runs
// after the middleware a router's Use adds.
func TestChiRouteKeys(t *testing.T) {
	t.Run("a route", func(t *testing.T) {
		t.Parallel()
		l := newChiLimit(t)
		r := chi.NewRouter()
		r.With(l.mw).Get("/users/{id}", chiOK)
		r.Group(func(g chi.Router) {
			g.Use(l.mw) // inline: runs once the group's route matched
			g.Post("/users/{id}/avatar", chiOK)
		})
		assert.Equal(t, []int{200, 200, 429}, statuses(r, "GET /users/1", "GET /users/2", "GET /users/3"),
			"one bucket for the route, whatever the id")
		assert.Equal(t, []int{200}, statuses(r, "POST /users/1/avatar"))
		assert.Equal(t, []string{routeLimiter("/users/{id}"), routeLimiter("/users/{id}/avatar")}, l.limiters(t))
		assert.Empty(t, l.errs)
	})

	t.Run("a sub-router", func(t *testing.T) {
		t.Parallel()
		l := newChiLimit(t)
		r := chi.NewRouter()
		r.Route("/api", func(api chi.Router) {
			api.With(l.mw).Get("/items/{id}", chiOK)
			api.Route("/v2", func(v2 chi.Router) {
				v2.With(l.mw).Get("/items/{id}", chiOK)
			})
		})
		r.With(l.mw).Get("/items/{id}", chiOK)
		assert.Equal(t, []int{200, 200, 200}, statuses(r, "GET /api/items/1", "GET /api/v2/items/1", "GET /items/1"))
		assert.Equal(t, []string{
			routeLimiter("/api/items/{id}"),
			routeLimiter("/api/v2/items/{id}"),
			routeLimiter("/items/{id}"),
		}, l.limiters(t), "the full pattern: the same sub-route under two prefixes is two routes")
		assert.Empty(t, l.errs)
	})

	t.Run("a mounted router", func(t *testing.T) {
		t.Parallel()
		l := newChiLimit(t)
		admin := chi.NewRouter()
		admin.With(l.mw).Get("/stats/{day}", chiOK)
		admin.With(l.mw).Delete("/cache", chiOK)
		r := chi.NewRouter()
		r.Mount("/admin", admin)
		assert.Equal(t, []int{200, 200, 429, 200}, statuses(r, "GET /admin/stats/mon", "GET /admin/stats/tue", "GET /admin/stats/wed", "DELETE /admin/cache"))
		assert.Equal(t, []string{routeLimiter("/admin/cache"), routeLimiter("/admin/stats/{day}")}, l.limiters(t))
		assert.Empty(t, l.errs)
	})

	t.Run("Use on the root router: the route is not known yet", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			rule     policy.Option
			want     []int
			limiters []string
		}{
			// The default rule: the client IP, in the namespace of
			// requests without a key, one bucket for every route.
			{nil, []int{200, 200, 429}, []string{"route::ip:192.0.2.1"}},
			{policy.WithMissingKeyDeny(), []int{403, 403, 403}, []string{}},
		} {
			l := newChiLimit(t, c.rule)
			r := chi.NewRouter()
			r.Use(l.mw)
			r.Get("/users/{id}", chiOK)
			r.Get("/items/{id}", chiOK)
			assert.Equal(t, c.want, statuses(r, "GET /users/1", "GET /items/1", "GET /users/2"))
			assert.Equal(t, c.limiters, l.limiters(t))
			require.Len(t, l.errs, 3, "each request's error is reported")
			for _, err := range l.errs {
				assert.ErrorIs(t, err, keyfunc.ErrRouteUnknown)
				assert.NotErrorIs(t, err, keyfunc.ErrNoKey, "a configuration error, not a missing key")
				assert.Contains(t, err.Error(), "nethttprl: ", "it says where the middleware belongs")
			}
		}
	})

	t.Run("Use on a sub-router: the pattern of the mount", func(t *testing.T) {
		t.Parallel()
		l := newChiLimit(t)
		r := chi.NewRouter()
		r.Route("/api", func(api chi.Router) {
			api.Use(l.mw) // runs once the root matched "/api/*", before the sub-router routes
			api.Get("/items/{id}", chiOK)
			api.Get("/users/{id}", chiOK)
		})
		assert.Equal(t, []int{200, 200, 429}, statuses(r, "GET /api/items/1", "GET /api/users/1", "GET /api/items/2"),
			"one bucket for every route of the sub-router")
		assert.Equal(t, []string{routeLimiter("/api/*")}, l.limiters(t))
		assert.Empty(t, l.errs, "a pattern, so no error")
	})
}
