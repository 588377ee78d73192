package fiberrl

import "testing"

// TestRouteUseField checks that this Fiber marks the routes of app.Use in
// the field the middleware reads.
func TestRouteUseField(t *testing.T) {
	if routeUse == nil {
		t.Fatal("fiber.Route has no bool field use: Route cannot tell middleware entries from routes")
	}
}
