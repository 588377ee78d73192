// Command nethttp is an example API limited with nethttprl: a global
// per-IP limit, a strict login limit in wait mode, and a per-user limit.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/nethttprl"
)

type userKey struct{}

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from the request's context, where
	// authenticate put the user.
	p := demo.NewPolicies(client, nethttprl.Key(func(r *http.Request) (string, error) {
		user, _ := r.Context().Value(userKey{}).(string)
		return user, nil
	}))
	perIP := nethttprl.New(p.Global, nethttprl.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	login, perUser := nethttprl.New(p.Login), nethttprl.New(p.PerUser)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "logged in")
	})))
	mux.Handle("GET /me", authenticate(perUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", r.Context().Value(userKey{}))
	}))))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})

	demo.Banner("net/http")
	srv := &http.Server{Addr: demo.Addr(), Handler: perIP(mux), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get(demo.UserHeader)
		if user == "" {
			http.Error(w, "send "+demo.UserHeader, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}
