package policy

import (
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/redlimit/redlimit/core"
)

// registry holds the names of the policies of each Client, so that the
// policies of one name share one limit, and their overrides. A Client's
// entry goes when the Client is garbage collected: the registry does not
// keep it alive.
var registry = struct {
	sync.Mutex
	clients map[weak.Pointer[core.Client]]*clientNames
}{clients: map[weak.Pointer[core.Client]]*clientNames{}}

// clientNames are the policy names of one Client: what the policies of
// each must have in common, and their overrides, which the Client's
// watcher keeps up to date (see watch).
type clientNames struct {
	uses      map[string]use
	overrides map[string]*overrides
	stop      chan struct{} // closed when the Client is gone
}

// use is what the policies of one name must have in common. Key functions
// are not compared: functions cannot be, in Go.
type use struct {
	kind    kind
	rate    core.Rate // a concurrency limit's in Permits
	missing missingKey
}

// register records a policy called name, of use u, on c, and fails when a
// policy of that name on c has another kind, limit or missing-key choice.
// It returns the overrides of the name.
func register(c *core.Client, name string, u use) (*overrides, error) {
	registry.Lock()
	defer registry.Unlock()
	wp := weak.Make(c)
	cn := registry.clients[wp]
	if cn == nil {
		cn = &clientNames{uses: map[string]use{}, overrides: map[string]*overrides{}, stop: make(chan struct{})}
		registry.clients[wp] = cn
		runtime.AddCleanup(c, forget, wp)
		go watch(c.Redis(), cn)
	}
	prev, ok := cn.uses[name]
	switch {
	case !ok:
		cn.uses[name] = u
		cn.overrides[name] = newOverrides(c, name)
	case prev.kind != u.kind || prev.rate != u.rate:
		return nil, fmt.Errorf("policy %q: %w: a policy of this name on this client has %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev, u)
	case prev.missing != u.missing:
		return nil, fmt.Errorf("policy %q: %w: a policy of this name on this client has %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev.missing, u.missing)
	}
	return cn.overrides[name], nil
}

// String names the limit of u: its rate, or its concurrency limit.
func (u use) String() string {
	if u.kind == kindConcurrency {
		return fmt.Sprintf("a concurrency limit of %d", u.rate.Permits)
	}
	return "the rate " + u.rate.String()
}

// forget drops the names of a Client that was garbage collected, and stops
// its watcher.
func forget(wp weak.Pointer[core.Client]) {
	registry.Lock()
	defer registry.Unlock()
	if cn := registry.clients[wp]; cn != nil {
		close(cn.stop)
	}
	delete(registry.clients, wp)
}
