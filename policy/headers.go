package policy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/reqlimits"
)

// headerStyle selects the rate limit fields of responses.
type headerStyle uint8

const (
	// headersAll: the IETF draft RateLimit and RateLimit-Policy fields and
	// the X-RateLimit-* headers. The default.
	headersAll headerStyle = iota
	headersIETF
	headersLegacy
	headersNone
)

// Header names, in canonical form (http.CanonicalHeaderKey), as
// Exchange.SetHeader takes them.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerLimit           = "X-Ratelimit-Limit"
	headerRemaining       = "X-Ratelimit-Remaining"
	headerReset           = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// ProblemContentType is the media type of a Decision's Body (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem types of the bodies.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	problemCostExceedsRate = "https://github.com/redlimit/redlimit/blob/main/docs/middleware.md#a-cost-above-the-rate"
)

// failedRetryAfter is the Retry-After of a 503 answered by fail closed.
const failedRetryAfter = "1"

// header holds what a policy writes for one rate, built once.
type header struct {
	style       headerStyle
	inFlight    bool         // a concurrency limit: no reset time, no Retry-After
	policy      string       // RateLimit-Policy item (of a quota: without w)
	periods     *periodItems // a quota's RateLimit-Policy items, per length of its periods
	limit       string       // X-RateLimit-Limit value
	item        string       // the policy name as a structured-field string
	deny        []byte       // 429 body
	reject      []byte       // 403 body
	badCost     []byte       // 400 body
	tooCostly   []byte       // 413 body
	unavailable []byte       // 503 body
}

// newHeader builds the fields and bodies of the policy name, whose
// characters are printable ASCII, of kind k and rate r (of a concurrency
// limit or a quota, r.Permits is the limit, and period is a quota's).
func newHeader(name string, k kind, r core.Rate, period core.Period, style headerStyle) header {
	item := sfString(name)
	policy := item + ";q=" + strconv.FormatInt(r.Permits, 10)
	detail := "The request quota of this client is used up; retry after the time in Retry-After."
	var periods *periodItems
	switch {
	case k == kindConcurrency:
		policy += `;qu="concurrent-requests"`
		detail = "This client has as many requests in progress as it may; retry once one of them has finished."
	case k == kindQuota:
		// w is the length of the decision's period: see periodItems.
		periods = &periodItems{}
		detail = "The request quota of this client for the current " + strings.ToLower(period.String()) +
			" is used up; retry after the time in Retry-After."
	default:
		policy = withWindow(policy, r.Interval)
	}
	return header{
		style: style, inFlight: k == kindConcurrency, policy: policy, periods: periods, limit: strconv.FormatInt(r.Permits, 10), item: item,
		deny: problemJSON(problem{
			Type: problemQuotaExceeded, Title: "Too Many Requests", Status: http.StatusTooManyRequests,
			Detail: detail, ViolatedPolicies: []string{name},
		}),
		reject: problemJSON(problem{
			Type: "about:blank", Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "The request has no key for its rate limit, such as a user or an API key, and requests without one are refused.",
		}),
		badCost: problemJSON(problem{
			Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "The request's cost for its rate limit is missing or invalid.",
		}),
		tooCostly: problemJSON(problem{
			Type: problemCostExceedsRate, Title: "Request Cost Exceeds The Rate Limit", Status: http.StatusRequestEntityTooLarge,
			Detail:           "The request costs more permits than the rate limit grants in a whole window: it can never be served as it is.",
			ViolatedPolicies: []string{name},
		}),
		unavailable: problemJSON(problem{
			Type: problemReducedCapacity, Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The request could not be checked against its rate limit; retry after the time in Retry-After.",
		}),
	}
}

// withWindow returns the RateLimit-Policy item policy with w, the window
// (or period) in whole seconds; a window that is not whole seconds is left
// out rather than misstated.
func withWindow(policy string, window time.Duration) string {
	if window <= 0 || window%time.Second != 0 {
		return policy
	}
	return policy + ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
}

// periodItems are a quota's RateLimit-Policy items, one per length of its
// periods, whose w is that length (a Day of 23, 24 or 25 hours: 82800,
// 86400 or 90000), each built the first time a decision needs it. The
// lengths of one quota are few: a Month's are at most 12 (28 to 31 days,
// an hour more or less where clocks change).
type periodItems struct {
	all atomic.Pointer[[]periodItem] // copied on write
}

type periodItem struct {
	length time.Duration
	item   string
}

// maxPeriodItems bounds the items kept; further ones are built when used.
const maxPeriodItems = 16

// get returns the item policy (without w) of a period of length.
func (pi *periodItems) get(policy string, length time.Duration) string {
	all := pi.all.Load()
	var kept []periodItem
	if all != nil {
		kept = *all
	}
	for _, it := range kept {
		if it.length == length {
			return it.item
		}
	}
	item := withWindow(policy, length)
	if len(kept) < maxPeriodItems {
		next := append(append(make([]periodItem, 0, len(kept)+1), kept...), periodItem{length, item})
		pi.all.CompareAndSwap(all, &next) // lost to another: built again next time
	}
	return item
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

// writeHeaders writes the rate limit fields of d to x. A refusal over the
// limit gets Retry-After, in whole seconds rounded up; a 503 of fail
// closed gets Retry-After 1; a request decided without a limiter, or
// refused for its cost, gets none. A concurrency limit's fields have no
// time (t, X-RateLimit-Reset, Retry-After): when a slot frees is not known.
// A quota's w is the length of the decision's period, and its times run to
// the period's end. When several policies limit one
// request, each adds its item to the RateLimit and RateLimit-Policy lists
// (lim holds them), and the X-RateLimit-* headers are those of the
// request's headline decision (see headline).
func (p *Policy) writeHeaders(x Exchange, lim *reqlimits.Limits, d *Decision, headline bool) {
	if d.Status == http.StatusServiceUnavailable {
		x.SetHeader(headerRetryAfter, failedRetryAfter)
		return
	}
	if d.prep == nil || d.Result.Rate.Permits == 0 {
		return // no limiter decided: no key, or a cost refused
	}
	h := &d.prep.headers
	refused := d.Status != 0
	// t and X-RateLimit-Reset: until the request could be granted when
	// denied (dry run included), until the quota is full again when
	// allowed.
	t := ceilSeconds(d.Result.ResetAfter, 0)
	if !d.Result.Allowed {
		t = ceilSeconds(d.Result.RetryAfter, 1)
	}
	remaining := max(d.Result.Remaining, 0)
	ietf := h.style == headersAll || h.style == headersIETF
	legacy := h.style == headersAll || h.style == headersLegacy
	legacy = legacy && headline

	// The numbers, t then remaining, and the RateLimit item, formatted
	// into one string of which every value is a part.
	var buf [128]byte
	b := strconv.AppendInt(buf[:0], t, 10)
	tEnd := len(b)
	b = strconv.AppendInt(b, remaining, 10)
	rEnd := len(b)
	if ietf {
		b = append(b, h.item...)
		b = append(b, ";r="...)
		b = append(b, b[tEnd:rEnd]...)
		if !h.inFlight {
			b = append(b, ";t="...)
			b = append(b, b[:tEnd]...)
		}
	}
	s := string(b)
	if refused && !h.inFlight {
		x.SetHeader(headerRetryAfter, s[:tEnd])
	}
	if ietf {
		policy := h.policy
		if h.periods != nil {
			policy = h.periods.get(policy, d.Result.Rate.Interval)
		}
		lim.Policies = appendItem(lim.Policies, policy)
		lim.Items = appendItem(lim.Items, s[rEnd:])
		x.SetHeader(headerRateLimitPolicy, lim.Policies)
		x.SetHeader(headerRateLimit, lim.Items)
	}
	if legacy {
		x.SetHeader(headerLimit, h.limit)
		x.SetHeader(headerRemaining, s[tEnd:rEnd])
		if h.inFlight {
			x.SetHeader(headerReset, "") // an earlier policy's, which is not the headline
		} else {
			x.SetHeader(headerReset, s[:tEnd])
		}
	}
}

// appendItem appends item to a structured-field list.
func appendItem(list, item string) string {
	if list == "" {
		return item
	}
	return list + ", " + item
}

// ceilSeconds rounds d up to whole seconds, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, least)
}
