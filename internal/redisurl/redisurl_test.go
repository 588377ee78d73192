package redisurl

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The password of every URL below; no part of it of 3 characters or more
// may be told.
const password = "Zq9Xw7"

// A malformed REDIS_URL is reported without its password, or any part of
// it, and the report still says what is wrong, where redis.ParseURL's own
// error quotes the URL whole (or the part of the password that broke it).
func TestRedactHidesThePassword(t *testing.T) {
	for _, c := range []struct {
		url   string
		wrong string // what the report says is wrong
		leaks bool   // redis.ParseURL's error tells the password, or a part of it
	}{
		{"redis://user:Zq9Xw7@host:notaport", `invalid port ":notaport" after host`, true},
		{"redis://Zq9Xw7@host:notaport", `invalid port ":notaport" after host`, true},
		{"rediss://user:Zq9Xw7@ho st:6379", `invalid character " " in host name`, true},
		{"redis://user:Zq9Xw7@host:6379/0\n", "invalid control character in URL", true},
		{"redis://user:Zq9Xw7@host:6379/zero", `invalid database number: "zero"`, false},
		{"redis://user:Zq9Xw7@host:6379/0?dial_timeout=soon", "invalid dial_timeout duration", false},
		{"redis://user:Zq9Xw7@host:6379/0?pool=3", "unexpected option: pool", false},
		{"ftp://user:Zq9Xw7@host", "invalid URL scheme: ftp", false},
		{"user:Zq9Xw7@host:6379", "invalid URL scheme: user", false},
		{"unix://user:Zq9Xw7@", "empty unix socket path", false},
		// A password that breaks the URL: unencoded, its "/", "?" or "#"
		// ends the host early, and url.Parse quotes what follows as a port.
		{"redis://user:Zq9/Xw7@host:6379", "user information", true},
		{"redis://user:Zq9?Xw7@host:6379", "user information", true},
		{"redis://user:Zq9#Xw7@host:6379", "user information", true},
		{"redis://user:Zq9%zzXw7@host:6379", "user information", true},
		{"redis://user:Zq9 Xw7@host:6379", "user information", true},
		{"redis://user:Zq9@Xw7@host:notaport", `invalid port ":notaport" after host`, true},
	} {
		t.Run(c.url, func(t *testing.T) {
			_, raw := redis.ParseURL(c.url)
			require.Error(t, raw, "the URL is malformed")
			assert.Equal(t, c.leaks, tells(raw.Error()), "redis.ParseURL's own error: %v", raw)
			err := Redact(raw, c.url)
			require.Error(t, err)
			assert.False(t, tells(err.Error()), "the report tells the password: %v", err)
			assert.Contains(t, err.Error(), c.wrong)
		})
	}
}

// tells reports whether s holds the password, or a part of it of 3
// characters or more.
func tells(s string) bool {
	for i := range len(password) - 2 {
		for j := i + 3; j <= len(password); j++ {
			if strings.Contains(s, password[i:j]) {
				return true
			}
		}
	}
	return false
}

// A URL without a password keeps its error, which cannot give one away;
// no error stays no error.
func TestRedactKeepsErrorsWithoutAPassword(t *testing.T) {
	_, raw := redis.ParseURL("redis://host:notaport")
	require.Error(t, raw)
	assert.Equal(t, raw, Redact(raw, "redis://host:notaport"))
	_, raw = redis.ParseURL("redis://user:@host:notaport")
	require.Error(t, raw)
	assert.Equal(t, raw, Redact(raw, "redis://user:@host:notaport"), "an empty password")
	assert.NoError(t, Redact(nil, "redis://user:"+password+"@host:6379"))
	assert.Equal(t, "boom", Redact(errors.New("boom"), "redis://host").Error())
}

// redact replaces the password as url.URL.Redacted does, and the user
// information whole when it has no ":".
func TestRedact(t *testing.T) {
	for url, want := range map[string]string{
		"redis://user:Zq9Xw7@host:6379/0": "redis://user:xxxxx@host:6379/0",
		"redis://:Zq9Xw7@host:6379":       "redis://:xxxxx@host:6379",
		"redis://Zq9Xw7@host:6379":        "redis://xxxxx@host:6379",
		"redis://Zq9Xw7@":                 "redis://xxxxx@",
		"redis://u:Zq9/X:w7@host:6379":    "redis://u:xxxxx@host:6379",
		"redis:user:Zq9Xw7@host":          "redis:user:xxxxx@host",
		"unix://user:Zq9Xw7@/run/redis":   "unix://user:xxxxx@/run/redis",
	} {
		got, ok := redact(url)
		assert.True(t, ok, url)
		assert.Equal(t, want, got, url)
	}
	for _, url := range []string{"redis://host:6379", "redis://@host", "redis://user:@host"} {
		got, ok := redact(url)
		assert.False(t, ok, url)
		assert.Equal(t, url, got)
	}
}

// A malformed Cluster URL is reported by RedactCluster without its
// password, and says what is wrong as redis.ParseClusterURL sees it.
func TestRedactClusterHidesThePassword(t *testing.T) {
	for _, c := range []struct{ url, wrong string }{
		{"redis://user:Zq9Xw7@host:notaport?addr=other:6379", `invalid port ":notaport" after host`},
		{"redis://user:Zq9Xw7@host:6379?addr=other:6379&db=1", "unexpected option: db"},
		{"redis://user:Zq9/Xw7@host:6379?addr=other:6379", "user information"},
	} {
		_, raw := redis.ParseClusterURL(c.url)
		require.Error(t, raw, c.url)
		err := RedactCluster(raw, c.url)
		require.Error(t, err)
		assert.False(t, tells(err.Error()), "the report tells the password: %v", err)
		assert.Contains(t, err.Error(), c.wrong, c.url)
	}
}
