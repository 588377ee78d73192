package policy

import (
	"encoding/json"
	"strings"
	"time"
)

// MarshalJSON describes the policy to an operator, as package admin lists
// it: its name, its kind ("rate", "concurrency" or "quota"), its own limit
// (not a key's override, nor what a rate function chooses) and, for a
// rate, its interval in milliseconds; for a quota, its calendar period and,
// but for UTC, its time zone. The limit of a rate is its permits per
// interval, of a concurrency limit its requests in flight per key, and of
// a quota its permits per period:
//
//	{"name":"user","kind":"rate","limit":5,"interval_ms":60000}
//	{"name":"exports","kind":"concurrency","limit":2}
//	{"name":"daily","kind":"quota","limit":1000,"period":"day","time_zone":"Europe/Paris"}
func (p *Policy) MarshalJSON() ([]byte, error) {
	d := struct {
		Name       string `json:"name"`
		Kind       string `json:"kind"`
		Limit      int64  `json:"limit"`
		IntervalMS int64  `json:"interval_ms,omitempty"`
		Period     string `json:"period,omitempty"`
		TimeZone   string `json:"time_zone,omitempty"`
	}{Name: p.name, Kind: "rate", Limit: p.base.rate.Permits, IntervalMS: p.base.rate.Interval.Milliseconds()}
	switch p.kind {
	case kindConcurrency:
		d.Kind, d.IntervalMS = "concurrency", 0
	case kindQuota:
		d.Kind, d.Limit, d.IntervalMS = "quota", p.quota.Limit, 0
		d.Period = strings.ToLower(p.quota.Period.String())
		if loc := p.quota.Location; loc != nil && loc != time.UTC {
			d.TimeZone = loc.String()
		}
	}
	return json.Marshal(d)
}
