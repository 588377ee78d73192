package policy

import (
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/redlimit/redlimit/core"
)

// registry holds the names of the policies of each Client, so that the
// policies of one name share one limit. A Client's entry goes when the
// Client is garbage collected: the registry does not keep it alive.
var registry = struct {
	sync.Mutex
	clients map[weak.Pointer[core.Client]]map[string]use
}{clients: map[weak.Pointer[core.Client]]map[string]use{}}

// use is what the policies of one name must have in common. Key functions
// are not compared: functions cannot be, in Go.
type use struct {
	rate    core.Rate
	missing missingKey
}

// register records a policy called name, of rate r, on c, and fails when a
// policy of that name on c has another rate or missing-key choice.
func register(c *core.Client, name string, r core.Rate, missing missingKey) error {
	registry.Lock()
	defer registry.Unlock()
	wp := weak.Make(c)
	names := registry.clients[wp]
	if names == nil {
		names = map[string]use{}
		registry.clients[wp] = names
		runtime.AddCleanup(c, forget, wp)
	}
	u := use{rate: r, missing: missing}
	prev, ok := names[name]
	switch {
	case !ok:
		names[name] = u
		return nil
	case prev.rate != r:
		return fmt.Errorf("policy %q: %w: a policy of this name on this client has the rate %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev.rate, r)
	case prev.missing != missing:
		return fmt.Errorf("policy %q: %w: a policy of this name on this client has %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev.missing, missing)
	}
	return nil
}

// forget drops the names of a Client that was garbage collected.
func forget(wp weak.Pointer[core.Client]) {
	registry.Lock()
	delete(registry.clients, wp)
	registry.Unlock()
}
