package policy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/observe"
)

// headerStyle selects the rate limit headers of responses.
type headerStyle uint8

const (
	// headersAll: the IETF draft-10 RateLimit and RateLimit-Policy fields
	// and the X-RateLimit-* headers. The default.
	headersAll headerStyle = iota
	headersIETF
	headersLegacy
	headersNone
)

// Header names, as written.
const (
	headerRateLimitPolicy = "RateLimit-Policy"
	headerRateLimit       = "RateLimit"
	headerLimit           = "X-RateLimit-Limit"
	headerRemaining       = "X-RateLimit-Remaining"
	headerReset           = "X-RateLimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// ProblemContentType is the media type of the bodies Reply returns
// (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem types of the IETF rate limit headers draft.
const (
	ProblemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// FailedRetryAfter is the Retry-After of a 503 answered by fail closed.
const FailedRetryAfter = "1"

// HeaderWriter edits response headers; http.Header (net/http, gin, echo)
// is one.
type HeaderWriter interface {
	Get(key string) string
	Set(key, value string)
	Add(key, value string)
}

// header holds what a policy writes for one rate, built once.
type header struct {
	style       headerStyle
	policy      string // RateLimit-Policy value
	limit       string // X-RateLimit-Limit value
	item        string // the policy name as a structured-field string
	deny        []byte // 429 body
	reject      []byte // 403 body
	tooCostly   []byte // 413 body
	unavailable []byte // 503 body
}

// ProblemCostExceedsRate is the problem type of a 413: the request's cost
// is above the rate, so it can never be granted.
const ProblemCostExceedsRate = "https://github.com/redlimit/redlimit#cost-exceeds-the-rate"

// newHeader builds the headers and bodies of the policy name, whose
// characters are printable ASCII.
func newHeader(name string, r core.Rate, style headerStyle) header {
	item := sfString(name)
	policy := item + ";q=" + strconv.FormatInt(r.Permits, 10)
	if r.Interval%time.Second == 0 {
		// w is whole seconds; a sub-second window is left out rather than
		// misstated.
		policy += ";w=" + strconv.FormatInt(int64(r.Interval/time.Second), 10)
	}
	return header{
		style: style, policy: policy, limit: strconv.FormatInt(r.Permits, 10), item: item,
		deny: problemJSON(problem{
			Type: ProblemQuotaExceeded, Title: "Too Many Requests", Status: http.StatusTooManyRequests,
			Detail:           "The request quota of this client is used up; retry after the time in Retry-After.",
			ViolatedPolicies: []string{name},
		}),
		reject: problemJSON(problem{
			Type: "about:blank", Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "The request has no key for its rate limit, such as a user or an API key, and requests without one are refused.",
		}),
		tooCostly: problemJSON(problem{
			Type: ProblemCostExceedsRate, Title: "Request Cost Exceeds The Rate Limit", Status: http.StatusRequestEntityTooLarge,
			Detail:           "The request costs more permits than the rate limit grants in a whole window: it can never be served as it is.",
			ViolatedPolicies: []string{name},
		}),
		unavailable: problemJSON(problem{
			Type: ProblemReducedCapacity, Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The request could not be checked against its rate limit; retry after the time in Retry-After.",
		}),
	}
}

func problemJSON(p problem) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and an int
	}
	return b
}

type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// sfString quotes name, printable ASCII, as an RFC 8941 structured-field
// string.
func sfString(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}

// SetHeaders writes the rate limit headers of d. A denial gets
// Retry-After, in whole seconds rounded up; a failure answered by fail
// closed gets Retry-After 1; a request with no key gets none, nor does a
// dry-run denial unless the policy asked for them. When several policies
// limit one request, each adds its item to the RateLimit and
// RateLimit-Policy lists; the X-RateLimit-* headers are those of the policy
// that denied the request, or, when none did, of the policy with the fewest
// permits remaining. Written into an http.Header, the headers cost two
// allocations.
func (p *Policy) SetHeaders(h HeaderWriter, d Decision) {
	var (
		buf [128]byte
		f   fields
	)
	p.fields(&f, d, h.Get(canonRemaining), buf[:0])
	if hh, ok := h.(http.Header); ok {
		f.writeTo(hh)
		return
	}
	for i := 0; i < f.n; i++ {
		if f.add[i] {
			h.Add(f.key[i], f.val[i])
		} else {
			h.Set(f.key[i], f.val[i])
		}
	}
}

// fields are the headers of one decision, in canonical form.
type fields struct {
	n   int
	key [6]string
	val [6]string
	add [6]bool // a list: add, not set
}

func (f *fields) put(key, val string, add bool) {
	f.key[f.n], f.val[f.n], f.add[f.n] = key, val, add
	f.n++
}

// Canonical header names, as http.Header stores them.
var (
	canonRateLimitPolicy = http.CanonicalHeaderKey(headerRateLimitPolicy)
	canonRateLimit       = http.CanonicalHeaderKey(headerRateLimit)
	canonLimit           = http.CanonicalHeaderKey(headerLimit)
	canonRemaining       = http.CanonicalHeaderKey(headerRemaining)
	canonReset           = http.CanonicalHeaderKey(headerReset)
	canonRetryAfter      = http.CanonicalHeaderKey(headerRetryAfter)
)

// fields computes the headers of d. Its numbers are formatted into b and
// turned into one string, of which every value is a part.
func (p *Policy) fields(f *fields, d Decision, remainingSet string, b []byte) {
	switch d.Outcome {
	case Failed:
		if p.failure == failClosed {
			f.put(canonRetryAfter, FailedRetryAfter, false)
		}
		return
	case Rejected, Unlimited, TooCostly:
		return
	}
	if d.observed == observe.DryRunDenied && !p.dryHdrs {
		return
	}
	h := p.headersOf(d)
	// t and X-RateLimit-Reset: until the request could be granted when
	// denied, until the quota is full again when allowed.
	t := ceilSeconds(d.Result.ResetAfter, 0)
	if d.Outcome == Denied {
		t = ceilSeconds(d.Result.RetryAfter, 1)
	}
	remaining := max(d.Result.Remaining, 0)
	style := h.style
	ietf := style == headersAll || style == headersIETF
	legacy := (style == headersAll || style == headersLegacy) && (d.Outcome == Denied || fewer(remainingSet, remaining))

	// Formatted numbers: t, remaining, then the RateLimit item.
	b = strconv.AppendInt(b, t, 10)
	tEnd := len(b)
	b = strconv.AppendInt(b, remaining, 10)
	rEnd := len(b)
	if ietf {
		b = append(b, h.item...)
		b = append(b, ";r="...)
		b = append(b, b[tEnd:rEnd]...)
		b = append(b, ";t="...)
		b = append(b, b[:tEnd]...)
	}
	s := string(b)
	if d.Outcome == Denied {
		f.put(canonRetryAfter, s[:tEnd], false)
	}
	if ietf {
		f.put(canonRateLimitPolicy, h.policy, true)
		f.put(canonRateLimit, s[rEnd:], true)
	}
	if legacy {
		f.put(canonLimit, h.limit, false)
		f.put(canonRemaining, s[tEnd:rEnd], false)
		f.put(canonReset, s[:tEnd], false)
	}
}

// writeTo writes f into h with one allocation for all the values: a list
// header that is already there is appended to.
func (f *fields) writeTo(h http.Header) {
	if f.n == 0 {
		return
	}
	slab := make([]string, f.n)
	for i := 0; i < f.n; i++ {
		k, v := f.key[i], f.val[i]
		if old := h[k]; f.add[i] && len(old) > 0 {
			h[k] = append(old, v)
			continue
		}
		slab[i] = v
		h[k] = slab[i : i+1 : i+1]
	}
}

// fewer reports whether remaining is below the X-RateLimit-Remaining value
// another policy already set, or no policy did.
func fewer(set string, remaining int64) bool {
	if set == "" {
		return true
	}
	n, err := strconv.ParseInt(set, 10, 64)
	return err != nil || remaining < n
}

// headersOf returns the headers of the rate d was decided with.
func (p *Policy) headersOf(d Decision) *header {
	if d.prep != nil {
		return &d.prep.headers
	}
	return &p.base.headers
}

// ceilSeconds rounds d up to whole seconds, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, least)
}
