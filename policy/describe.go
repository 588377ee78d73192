package policy

import "encoding/json"

// MarshalJSON describes the policy to an operator, as package admin lists
// it: its name, its kind ("rate" or "concurrency"), its own limit (not a
// key's override, nor what a rate function chooses) and, for a rate, its
// interval in milliseconds. The limit of a rate is its permits per interval,
// and of a concurrency limit its requests in flight per key:
//
//	{"name":"user","kind":"rate","limit":5,"interval_ms":60000}
//	{"name":"exports","kind":"concurrency","limit":2}
func (p *Policy) MarshalJSON() ([]byte, error) {
	d := struct {
		Name       string `json:"name"`
		Kind       string `json:"kind"`
		Limit      int64  `json:"limit"`
		IntervalMS int64  `json:"interval_ms,omitempty"`
	}{Name: p.name, Kind: "rate", Limit: p.base.rate.Permits, IntervalMS: p.base.rate.Interval.Milliseconds()}
	if p.kind == kindConcurrency {
		d.Kind, d.IntervalMS = "concurrency", 0
	}
	return json.Marshal(d)
}
