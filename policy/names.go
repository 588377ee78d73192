package policy

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
	"weak"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// registry holds the names of the policies of each Client, so that two
// policies share a budget only when they were given the same name. A
// Client's entry goes when the Client is garbage collected: the registry
// does not keep it alive.
var registry = struct {
	sync.Mutex
	clients map[weak.Pointer[core.Client]]*clientNames
}{clients: map[weak.Pointer[core.Client]]*clientNames{}}

// clientNames are the policy names in use on one Client.
type clientNames struct {
	byName  map[string]use
	unnamed map[string]int // automatic names given, by rate
}

// use is what the policies of one name have in common.
type use struct {
	rate    core.Rate
	keys    []uintptr // the code of each key function
	missing missingKey
	auto    bool // named after its rate
}

// register records a policy of rate r on c and returns its name: the name
// given, or for an unnamed policy, a name of its own after its rate.
func register(c *core.Client, r core.Rate, s *settings, key keyfunc.KeyFunc) (string, error) {
	keys := s.keys
	if len(keys) == 0 {
		keys = []keyfunc.KeyFunc{key}
	}
	u := use{rate: r, keys: code(keys), missing: s.missing, auto: !s.named}

	registry.Lock()
	defer registry.Unlock()
	wp := weak.Make(c)
	names := registry.clients[wp]
	if names == nil {
		names = &clientNames{byName: map[string]use{}, unnamed: map[string]int{}}
		registry.clients[wp] = names
		runtime.AddCleanup(c, forget, wp)
	}
	if !s.named {
		base := rateName(r)
		n := names.unnamed[base]
		name := ""
		for {
			n++
			name = base
			if n > 1 {
				name += "-" + strconv.Itoa(n)
			}
			if _, taken := names.byName[name]; !taken {
				break
			}
		}
		names.unnamed[base] = n
		names.byName[name] = u
		return name, nil
	}
	prev, ok := names.byName[s.name]
	if !ok {
		names.byName[s.name] = u
		return s.name, nil
	}
	var why string
	switch {
	case prev.auto:
		why = "it is the name an unnamed middleware of this client got; name that one too"
	case prev.rate != r:
		why = fmt.Sprintf("a middleware of this name has the rate %v, and this one %v", prev.rate, r)
	case !slices.Equal(prev.keys, u.keys):
		why = "a middleware of this name has other key functions"
	case prev.missing != u.missing:
		why = fmt.Sprintf("a middleware of this name has %v, and this one %v", prev.missing, u.missing)
	default:
		return s.name, nil // the same limit, shared on purpose
	}
	return "", fmt.Errorf("WithName(%q): %w: middlewares of one client share a name, and so a budget, only with the same rate and key: %s",
		s.name, core.ErrInvalidOption, why)
}

// forget drops the names of a Client that was garbage collected.
func forget(wp weak.Pointer[core.Client]) {
	registry.Lock()
	delete(registry.clients, wp)
	registry.Unlock()
}

// code returns the address of the code of each function: two closures of
// one function literal have the same, whatever they captured.
func code(fns []keyfunc.KeyFunc) []uintptr {
	out := make([]uintptr, len(fns))
	for i, fn := range fns {
		out[i] = reflect.ValueOf(fn).Pointer()
	}
	return out
}

// rateName is the name of an unnamed policy of rate r: "100-per-1m" for
// 100 per minute, "5-per-1500ms".
func rateName(r core.Rate) string {
	iv := r.Interval
	unit := "ms"
	n := int64(iv / time.Millisecond)
	switch {
	case iv%time.Hour == 0:
		unit, n = "h", int64(iv/time.Hour)
	case iv%time.Minute == 0:
		unit, n = "m", int64(iv/time.Minute)
	case iv%time.Second == 0:
		unit, n = "s", int64(iv/time.Second)
	}
	return strconv.FormatInt(r.Permits, 10) + "-per-" + strconv.FormatInt(n, 10) + unit
}
