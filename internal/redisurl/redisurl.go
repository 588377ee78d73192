// Package redisurl says what is wrong with a Redis URL without the password
// it holds. The examples and the redlimit command read their Redis from a
// URL with redis.ParseURL (or redis.ParseClusterURL), whose errors from
// net/url quote the whole URL, password included, and may quote a part of a
// password that breaks the URL.
package redisurl

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redact returns what redis.ParseURL's error err says is wrong with
// rawURL, without rawURL's password: the error of the same URL with its
// password replaced by "xxxxx", or, if that URL parses, an error saying that
// the user information cannot be parsed. A URL without a password, which
// err cannot give away, keeps err. Redact returns nil if err is nil.
func Redact(err error, rawURL string) error {
	return redactWith(err, rawURL, func(u string) error { _, err := redis.ParseURL(u); return err })
}

// RedactCluster is Redact for redis.ParseClusterURL's error err.
func RedactCluster(err error, rawURL string) error {
	return redactWith(err, rawURL, func(u string) error { _, err := redis.ParseClusterURL(u); return err })
}

// redactWith is Redact for the parser parse.
func redactWith(err error, rawURL string, parse func(string) error) error {
	if err == nil {
		return nil
	}
	redacted, ok := redact(rawURL)
	if !ok {
		return err
	}
	if err := parse(redacted); err != nil {
		return err // the same mistake, said of the URL without its password
	}
	return errors.New(`redis: the URL's user information (before its last "@") cannot be parsed: ` +
		`percent-encode the characters : / ? # @ % and spaces of the user name and password`)
}

// redact returns rawURL with its password replaced by "xxxxx", as
// url.URL.Redacted does, and whether it had one. A URL that does not parse
// has no reliable parts, so the user information is taken to run from the
// scheme to the last "@", wherever that is, so that a password holding
// "/", "?" or "#" is hidden whole; user information without ":" is taken
// for a password, as redis-cli takes it.
func redact(rawURL string) (string, bool) {
	at := strings.LastIndexByte(rawURL, '@')
	if at < 0 {
		return rawURL, false
	}
	start := 0
	if i := strings.Index(rawURL, "//"); i >= 0 && i < at {
		start = i + 2
	} else if i := strings.IndexByte(rawURL, ':'); i >= 0 && i < at {
		start = i + 1 // no authority: "scheme:user:password@host"
	}
	if i := strings.IndexByte(rawURL[start:at], ':'); i >= 0 {
		start += i + 1 // "user:" stays
	}
	if start == at {
		return rawURL, false // an empty password: nothing to hide
	}
	return rawURL[:start] + "xxxxx" + rawURL[at:], true
}
