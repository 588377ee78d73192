package policy

import (
	"fmt"
	"runtime"
	"strings"
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
	rate    core.Rate // a concurrency limit's or a quota's in Permits
	quota   quotaUse  // a quota's period and time zone
	missing missingKey
}

// quotaUse is a quota's period and the name of its time zone: two
// Locations loaded apart are one zone when their names are.
type quotaUse struct {
	period core.Period
	zone   string
}

// quotaOf returns the quotaUse of q, for a policy of kind k.
func quotaOf(k kind, q core.Quota) quotaUse {
	if k != kindQuota {
		return quotaUse{}
	}
	return quotaUse{period: q.Period, zone: q.Location.String()} // nil: "UTC"
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
	case prev.kind != u.kind || prev.rate != u.rate || prev.quota != u.quota:
		return nil, fmt.Errorf("policy %q: %w: a policy of this name on this client has %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev, u)
	case prev.missing != u.missing:
		return nil, fmt.Errorf("policy %q: %w: a policy of this name on this client has %v, and this one %v; "+
			"policies of one name share one budget, so give each limit a name of its own", name, core.ErrInvalidOption, prev.missing, u.missing)
	}
	return cn.overrides[name], nil
}

// String names the limit of u: its rate, its concurrency limit or its
// quota.
func (u use) String() string {
	switch u.kind {
	case kindConcurrency:
		return fmt.Sprintf("a concurrency limit of %d", u.rate.Permits)
	case kindQuota:
		return fmt.Sprintf("a quota of %d a %s in %s", u.rate.Permits, strings.ToLower(u.quota.period.String()), u.quota.zone)
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
