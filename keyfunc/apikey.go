package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
)

// maxInlineKey is the longest API key hashed with a secret without
// allocating.
const maxInlineKey = 448

type apiKeyConfig struct {
	secret     []byte
	ipad, opad [sha256.BlockSize]byte
}

// An APIKeyOption configures APIKey and APIKeyQuery.
type APIKeyOption func(*apiKeyConfig)

// WithSecret returns an option that hashes API keys with HMAC-SHA256 keyed
// by secret instead of plain SHA-256. API keys are usually high-entropy, so
// their plain hashes cannot be reversed, but anyone able to read Redis could
// still confirm a guessed or leaked key by hashing it; with a secret they
// cannot. Changing the secret changes every key part, which resets the
// limits of all API keys. An empty secret means no secret. The secret is
// copied.
func WithSecret(secret []byte) APIKeyOption {
	secret = append([]byte(nil), secret...)
	return func(c *apiKeyConfig) {
		c.secret = secret
	}
}

// APIKey returns a KeyFunc that uses the API key in the named header. The key
// never appears in the part, not even escaped: the part is '~' followed by the
// unpadded base64url encoding of the first 16 bytes of the key's SHA-256
// digest, or of its HMAC-SHA256 with WithSecret. A missing or empty key gives
// an error wrapping ErrNoKey. APIKey does not check that the key is valid:
// run it after authentication, or limit by IP before it, so that made-up keys
// cannot each get a fresh bucket. APIKey does not allocate when dst has 23
// bytes of spare capacity, except with a secret and a key longer than 448
// bytes.
func APIKey(header string, opts ...APIKeyOption) KeyFunc {
	c := newAPIKeyConfig(opts)
	errMissing := noKey("missing API key header %q", header)
	return func(r Request, dst []byte) ([]byte, error) {
		k := r.Header(header)
		if k == "" {
			return dst, errMissing
		}
		return c.appendHash(dst, k), nil
	}
}

// APIKeyQuery is like APIKey but takes the API key from the named query
// parameter.
func APIKeyQuery(param string, opts ...APIKeyOption) KeyFunc {
	c := newAPIKeyConfig(opts)
	errMissing := noKey("missing API key query parameter %q", param)
	return func(r Request, dst []byte) ([]byte, error) {
		k := r.Query(param)
		if k == "" {
			return dst, errMissing
		}
		return c.appendHash(dst, k), nil
	}
}

func newAPIKeyConfig(opts []APIKeyOption) *apiKeyConfig {
	c := new(apiKeyConfig)
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if len(c.secret) > 0 {
		// The HMAC pads, computed once (RFC 2104).
		k := c.secret
		if len(k) > sha256.BlockSize {
			sum := sha256.Sum256(k)
			k = sum[:]
		}
		copy(c.ipad[:], k)
		copy(c.opad[:], k)
		for i := range c.ipad {
			c.ipad[i] ^= 0x36
			c.opad[i] ^= 0x5c
		}
	}
	return c
}

// appendHash appends the hashed form of the API key k.
func (c *apiKeyConfig) appendHash(dst []byte, k string) []byte {
	var sum [sha256.Size]byte
	switch {
	case len(c.secret) == 0:
		sum = sha256.Sum256(stringBytes(k))
	case len(k) <= maxInlineKey:
		// HMAC on the stack: crypto/hmac allocates its hashes.
		var in [sha256.BlockSize + maxInlineKey]byte
		copy(in[:], c.ipad[:])
		n := copy(in[sha256.BlockSize:], k)
		inner := sha256.Sum256(in[:sha256.BlockSize+n])
		var out [sha256.BlockSize + sha256.Size]byte
		copy(out[:], c.opad[:])
		copy(out[sha256.BlockSize:], inner[:])
		sum = sha256.Sum256(out[:])
	default:
		sum = c.hmacLong(k)
	}
	return appendDigest(dst, sum[:16])
}

// hmacLong returns the HMAC-SHA256 of a key too long for appendHash's stack
// buffer. It is separate so that appendHash's buffers stay on the stack.
func (c *apiKeyConfig) hmacLong(k string) (sum [sha256.Size]byte) {
	h := hmac.New(sha256.New, c.secret)
	h.Write(stringBytes(k))
	copy(sum[:], h.Sum(nil))
	return sum
}
