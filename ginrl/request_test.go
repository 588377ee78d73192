package ginrl

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/keyfunc"
)

// TestRequest checks what key functions see of a gin request.
func TestRequest(t *testing.T) {
	gin.SetMode(gin.TestMode)
	key := keyfunc.Join(keyfunc.IP(), keyfunc.Route(), keyfunc.User("user"), keyfunc.Header("X-Tenant"),
		Key(func(c *gin.Context) (string, error) { return c.Param("id"), nil }))
	engine := gin.New()
	var (
		got string
		err error
	)
	engine.GET("/users/:id", func(c *gin.Context) {
		c.Set("user", "alice")
		got, err = key(&exchange{c: c})
	})
	req := httptest.NewRequest(http.MethodGet, "/users/7", nil)
	req.Header.Set("X-Tenant", "acme")
	engine.ServeHTTP(httptest.NewRecorder(), req)
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.1:GET%20%2Fusers%2F%3Aid:alice:acme:7", got)

	_, err = Key(func(*gin.Context) (string, error) { return "x", nil })(foreign{})
	assert.ErrorContains(t, err, "ginrl: a function of its Key, RateFunc or CostFunc used outside its middleware")
}

// foreign is a keyfunc.Request of another adapter.
type foreign struct{ keyfunc.Request }
