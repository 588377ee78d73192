package keyfunc_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/redlimit/redlimit/keyfunc"
)

// httpRequest adapts a net/http request to keyfunc.Request, as the net/http
// middleware does.
type httpRequest struct{ r *http.Request }

func (h httpRequest) Context() context.Context          { return h.r.Context() }
func (h httpRequest) Route() (string, error)            { return h.r.Pattern, nil }
func (h httpRequest) Header(name string) string         { return h.r.Header.Get(name) }
func (h httpRequest) HeaderValues(name string) []string { return h.r.Header.Values(name) }
func (h httpRequest) Query(name string) string          { return h.r.URL.Query().Get(name) }
func (h httpRequest) RemoteAddr() string                { return h.r.RemoteAddr }
func (h httpRequest) Value(key any) any                 { return h.r.Context().Value(key) }

type userKey struct{}

func ExampleEscape() {
	fmt.Println(keyfunc.Escape("alice"))
	fmt.Println(keyfunc.Escape("user:{42}"))
	fmt.Println(keyfunc.Escape(strings.Repeat("x", 65)))
	// Output:
	// alice
	// user%3A%7B42%7D
	// ~lTfF_fEgSC99WNJentWD9Q
}

func ExampleJoin() {
	r := httptest.NewRequest("GET", "/users/42", nil)
	r.Pattern = "GET /users/{id}"
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice:admin"))

	key := keyfunc.Join(keyfunc.User(userKey{}), keyfunc.Route())
	k, err := key(httpRequest{r})
	fmt.Println(k, err)
	// Output: alice%3Aadmin:GET%20%2Fusers%2F%7Bid%7D <nil>
}

func ExampleFallback() {
	key := keyfunc.Fallback(keyfunc.User(userKey{}), keyfunc.IP())

	r := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1:1234
	k, _ := key(httpRequest{r})
	fmt.Println(k)

	r = r.WithContext(context.WithValue(r.Context(), userKey{}, 42))
	k, _ = key(httpRequest{r})
	fmt.Println(k)
	// Output:
	// 192.0.2.1
	// 42
}

func ExampleIP() {
	proxies, err := keyfunc.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	key := keyfunc.IP(keyfunc.TrustProxies(proxies...))

	// Through the load balancer at 10.0.0.1: the client is the address
	// the balancer appended, not the one the client wrote.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:43210"
	r.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.7")
	k, _ := key(httpRequest{r})
	fmt.Println(k)

	// Directly from the internet: the header is ignored.
	r.RemoteAddr = "192.0.2.1:1234"
	k, _ = key(httpRequest{r})
	fmt.Println(k)

	// IPv6 clients are grouped by /64.
	r.RemoteAddr = "[2001:db8:1:2::abcd]:443"
	k, _ = key(httpRequest{r})
	fmt.Println(k)
	// Output:
	// 203.0.113.7
	// 192.0.2.1
	// 2001:db8:1:2::/64
}

func ExampleForwardedHeader() {
	proxies, err := keyfunc.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	key := keyfunc.IP(keyfunc.TrustProxies(proxies...), keyfunc.ForwardedHeader("Forwarded"))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:1234"
	r.Header.Add("Forwarded", `for=198.51.100.9`)
	r.Header.Add("Forwarded", `for="[2001:db8::17]:4711";proto=https, for=10.0.0.1`)
	k, _ := key(httpRequest{r})
	fmt.Println(k)
	// Output: 2001:db8::/64
}

func ExampleAPIKey() {
	key := keyfunc.APIKey("X-API-Key", keyfunc.WithSecret([]byte("from your secret store")))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk_live_abc123")
	k, _ := key(httpRequest{r})
	fmt.Println(len(k), strings.Contains(k, "abc123"))
	// Output: 22 false
}
