package policy

import (
	"weak"

	"github.com/redlimit/redlimit/core"
)

// Registered reports whether the registry holds names for c.
func Registered(c *core.Client) bool {
	registry.Lock()
	defer registry.Unlock()
	_, ok := registry.clients[weak.Make(c)]
	return ok
}

// RegisteredClients returns the number of Clients the registry holds.
func RegisteredClients() int {
	registry.Lock()
	defer registry.Unlock()
	return len(registry.clients)
}
