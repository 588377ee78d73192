package admin_test

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/admin"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

// The application's operators see its limits under /admin/limits/, and its
// on-call engineers may also reset a client and override its limit under
// /admin/limits-rw/. The handlers let anyone in: the application's own
// authentication is in front of them.
func ExampleHandler() {
	client, err := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	login := policy.MustNew(client, "login", core.PerMinute(5))
	exports := policy.MustNewConcurrency(client, "exports", 2)

	mux := http.NewServeMux()
	mux.Handle("/admin/limits/", only("operator",
		http.StripPrefix("/admin/limits", admin.Handler(login, exports))))
	mux.Handle("/admin/limits-rw/", only("on-call",
		http.StripPrefix("/admin/limits-rw", admin.WritableHandler(login, exports))))
	// GET /admin/limits/policies/login/keys/alice tells what alice's next
	// login gets; PUT /admin/limits-rw/policies/login/keys/alice/override
	// with {"limit": 20} gives her 20 a minute.
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// only serves h to the users of role, and refuses the others.
func only(role string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if roleOf(r) != role {
			http.Error(w, http.StatusText(http.StatusForbidden), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// roleOf stands for the application's authentication: the role of the
// request's signed-in user, from its session or token.
func roleOf(*http.Request) string { return "" }
