package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// An APIKeyOption configures APIKey and APIKeyQuery.
type APIKeyOption func(*apiKeyConfig)

type apiKeyConfig struct{ secret []byte }

// WithSecret returns an option that hashes API keys with HMAC-SHA256 keyed
// by secret instead of plain SHA-256. API keys are usually high-entropy, so
// their plain hashes cannot be reversed, but anyone able to read Redis could
// still confirm a guessed or leaked key by hashing it; with a secret they
// cannot. Changing the secret changes every key, which resets the limits of
// all API keys. An empty secret means no secret. The secret is copied.
func WithSecret(secret []byte) APIKeyOption {
	secret = append([]byte(nil), secret...)
	return func(c *apiKeyConfig) { c.secret = secret }
}

// APIKey returns a KeyFunc that uses the API key in the named header. The
// key never appears in the result, not even escaped: the result is the
// unpadded base64url encoding of the first 16 bytes of the key's SHA-256
// digest, or of its HMAC-SHA256 with WithSecret. A missing or empty key
// gives an error wrapping ErrNoKey. APIKey does not check that the key is
// valid: run it after authentication, or limit by IP before it, so that
// made-up keys cannot each get a fresh bucket.
func APIKey(header string, opts ...APIKeyOption) KeyFunc {
	hash := newAPIKeyHash(opts)
	errMissing := noKey("missing API key header %q", header)
	return func(r Request) (string, error) {
		k := r.Header(header)
		if k == "" {
			return "", errMissing
		}
		return hash(k), nil
	}
}

// APIKeyQuery is like APIKey but takes the API key from the named query
// parameter.
func APIKeyQuery(param string, opts ...APIKeyOption) KeyFunc {
	hash := newAPIKeyHash(opts)
	errMissing := noKey("missing API key query parameter %q", param)
	return func(r Request) (string, error) {
		k := r.Query(param)
		if k == "" {
			return "", errMissing
		}
		return hash(k), nil
	}
}

// newAPIKeyHash returns the function that hashes an API key.
func newAPIKeyHash(opts []APIKeyOption) func(string) string {
	var c apiKeyConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	encode := func(sum []byte) string { return base64.RawURLEncoding.EncodeToString(sum[:16]) }
	if len(c.secret) == 0 {
		return func(k string) string {
			sum := sha256.Sum256([]byte(k))
			return encode(sum[:])
		}
	}
	return func(k string) string {
		h := hmac.New(sha256.New, c.secret)
		h.Write([]byte(k))
		return encode(h.Sum(nil))
	}
}
