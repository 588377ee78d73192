package ginrl

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/keyfunc"
)

// TestRequestAllocs checks that building a key from a gin request, through
// the keyfunc.Request interface, does not allocate.
func TestRequestAllocs(t *testing.T) {
	gin.SetMode(gin.TestMode)
	key := keyfunc.Join(keyfunc.IP(), keyfunc.Route(), keyfunc.User("user"), keyfunc.Header("X-Tenant"))
	engine := gin.New()
	var (
		got    string
		allocs float64
	)
	engine.GET("/users/:id", func(c *gin.Context) {
		c.Set("user", "alice")
		buf := make([]byte, 0, 256)
		var err error
		allocs = testing.AllocsPerRun(100, func() {
			buf, err = key(request{c}, buf[:0])
		})
		if err != nil {
			t.Error(err)
		}
		got = string(buf)
	})
	req := httptest.NewRequest(http.MethodGet, "/users/7", nil)
	req.Header.Set("X-Tenant", "acme")
	engine.ServeHTTP(httptest.NewRecorder(), req)
	if got == "" || allocs != 0 {
		t.Fatalf("key %q, %v allocations", got, allocs)
	}
	t.Log(got)
}
