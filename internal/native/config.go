package native

import "github.com/redlimit/redlimit/policy"

// Config is what an adapter's options set: which requests the middleware
// skips (S, a predicate of the framework's request), what answers the
// requests over the limit (D, a handler) and what receives the policy's
// errors (E).
type Config[S, D, E any] struct {
	Skip    S
	Deny    D
	OnError E
}

// Configure returns the configuration that opts set, for the middleware
// that fn (such as "ginrl.New") makes to apply p; nil options are ignored.
// It panics if p is nil.
func Configure[T any, O ~func(*T)](fn string, p *policy.Policy, opts []O) T {
	if p == nil {
		panic(fn + ": nil *policy.Policy")
	}
	return Apply(opts)
}

// Apply returns the configuration that opts set; nil options are ignored.
func Apply[T any, O ~func(*T)](opts []O) T {
	var cfg T
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}
