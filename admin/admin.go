// Package admin serves an operator's view of policies as a JSON API: the
// policies, the keys each has in Redis, what a key's next request would get
// and why, and, when writes are allowed, a key's reset and its override of
// the limit. It is what the policy package's Peek, Keys, Reset and override
// methods do, over HTTP. Mounted under a path, behind the application's own
// check of who may see it (operatorsOnly here):
//
//	mux.Handle("/admin/limits/", operatorsOnly(http.StripPrefix("/admin/limits", admin.Handler(login, exports))))
//
// # Authentication
//
// The handler has no authentication or authorization of its own: mount it
// behind the application's, for operators only. Even read-only, it tells
// who is limited (the keys: users, client addresses) and how; with writes,
// whoever reaches it can lift any client's limit.
//
// # Endpoints
//
// Paths are relative to where the handler is mounted (with
// http.StripPrefix). Every answer is JSON (application/json), and every
// error an RFC 9457 problem (application/problem+json) saying what is
// wrong.
//
//	GET    /policies                              {"policies": [{"name", "kind", "limit", "interval_ms", "period", "time_zone"}]}
//	GET    /policies/{name}                       {"name", "kind", "limit", "interval_ms", "period", "time_zone"}
//	GET    /policies/{name}/keys?limit=N          {"policy", "keys": [...], "truncated"}
//	GET    /policies/{name}/keys/{key}            {"policy", "key", "allowed", "remaining", "limit", "interval_ms",
//	                                               "retry_after_ms", "reset_after_ms", "override"}
//	GET    /policies/{name}/keys/{key}/override   {"policy", "key", "limit"}; 404 when the key has none
//	POST   /policies/{name}/keys/{key}/reset      204: the key's state in Redis is forgotten
//	PUT    /policies/{name}/keys/{key}/override   body {"limit": N}; answers as GET
//	DELETE /policies/{name}/keys/{key}/override   204
//
// A policy is described as it marshals to JSON (policy.Policy.MarshalJSON):
// its kind is "rate", "concurrency" or "quota", its limit the permits per
// interval of a rate, the requests in flight of a concurrency limit and the
// permits per calendar period of a quota (whose period and, but for UTC,
// time zone follow). A key is the
// request's key as the key functions return it ("alice", ":ip:192.0.2.1"
// for a request without one, limited by its address, or a long key's hash,
// as the keys list it), one path segment escaped as url.PathEscape does:
// "a/b" is a%2Fb, and the keys "." and ".." are %2E and %2E%2E. A key's
// state is policy.Policy.Peek's: what its next request would get, taking
// nothing; its limit is the one in force, its override if it has one (then
// in "override" too); a key Redis holds nothing of has its whole limit. Times
// are in milliseconds, rounded up. The keys are the first N (1000 by default,
// at most 100 000) that Redis's SCAN finds, every master of a Cluster;
// truncated says there are more.
//
// A write that the handler does not allow is answered 403; an unknown policy
// or path 404; a method the path does not have 405; a bad key, limit or body
// 400; Redis failing 503.
package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/redlimit/redlimit/policy"
)

// Handler returns the read-only API of the policies ps: it answers the
// writes (reset, override set and delete) 403. It panics when a policy is
// nil, or two have one name.
func Handler(ps ...*policy.Policy) http.Handler { return newHandler(ps, false) }

// WritableHandler is Handler with writes allowed: a key's reset, and the
// setting and deletion of its override.
func WritableHandler(ps ...*policy.Policy) http.Handler { return newHandler(ps, true) }

// handler serves the API of some policies.
type handler struct {
	writes   bool
	byName   map[string]*policy.Policy
	listed   []json.RawMessage // each policy's description, in the order given
	describe map[string]json.RawMessage
}

func newHandler(ps []*policy.Policy, writes bool) http.Handler {
	h := &handler{writes: writes, byName: map[string]*policy.Policy{}, describe: map[string]json.RawMessage{}}
	for _, p := range ps {
		if p == nil {
			panic("admin: a nil *policy.Policy")
		}
		b, err := json.Marshal(p)
		var d struct {
			Name string `json:"name"`
		}
		if err == nil {
			err = json.Unmarshal(b, &d)
		}
		if err != nil {
			panic(fmt.Sprintf("admin: a policy's description: %v", err)) // policy's own JSON
		}
		if h.byName[d.Name] != nil {
			panic(fmt.Sprintf("admin: two policies named %q: give each once", d.Name))
		}
		h.byName[d.Name], h.describe[d.Name] = p, b
		h.listed = append(h.listed, b)
	}
	return h.routes()
}

// routes returns the API's mux.
func (h *handler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle(mux, "/policies", route{"GET", h.policies})
	handle(mux, "/policies/{name}", route{"GET", h.policy})
	handle(mux, "/policies/{name}/keys", route{"GET", h.keys})
	handle(mux, "/policies/{name}/keys/{key}", route{"GET", h.state})
	handle(mux, "/policies/{name}/keys/{key}/reset", route{"POST", h.write(h.reset)})
	handle(mux, "/policies/{name}/keys/{key}/override",
		route{"GET", h.override}, route{"PUT", h.write(h.setOverride)}, route{"DELETE", h.write(h.deleteOverride)})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, fmt.Sprintf("no resource at %s: the paths are /policies, /policies/{name}, "+
			"/policies/{name}/keys and /policies/{name}/keys/{key}[/reset|/override], "+
			"with a name or key escaped as one path segment (\"/\" is %%2F)", r.URL.EscapedPath()))
	})
	return mux
}

// route is a method of a path, and its handler.
type route struct {
	method string
	serve  http.HandlerFunc
}

// handle registers the routes of path, and answers its other methods 405.
func handle(mux *http.ServeMux, path string, routes ...route) {
	var allow []string
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+path, rt.serve)
		allow = append(allow, rt.method)
		if rt.method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	allowed := strings.Join(allow, ", ")
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allowed)
		problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not a method of this path: it has %s", r.Method, allowed))
	})
}

// write returns serve if the handler allows writes, and otherwise a
// handler that refuses them.
func (h *handler) write(serve http.HandlerFunc) http.HandlerFunc {
	if h.writes {
		return serve
	}
	return func(w http.ResponseWriter, r *http.Request) {
		problemOf(w, http.StatusForbidden, readOnlyType,
			"this endpoint is read-only: it shows limits, and does not reset keys or change overrides")
	}
}
