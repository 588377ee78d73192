package core

import (
	"errors"
	"fmt"
	"time"
)

// Status codes, as lua/lib.lua defines them. Every script's reply but
// acquire's starts with one; acquire's has one per limiter without a rate
// in code.
const (
	codeOK             = 0
	codeNotInitialized = 1
	codeInvalidConfig  = 2
	codeExceeds        = 3 // a semaphore's: more permits than its limit
)

// acquireReply reads the acquire script's reply v into the calls of
// groups, a group per limiter, in order. The reply starts with the server
// time in Unix ms (never a status code). Then, per limiter: for one without
// a rate in code, its status and, when OK, its stored rate (four values);
// then per acquire its remaining permits when granted, or -1 - remaining,
// the retry ms and the reset ms when denied (a retry of -1: more permits
// than the rate; of -2: a key of the limiter holds another type of value;
// below -2, -2 - retry: a bound of the retry time, not the exact one).
func acquireReply(v []int64, groups [][]*call) error {
	if len(v) == 0 {
		return errShortReply
	}
	at := 1 // v[0] is the time
	for _, g := range groups {
		l := g[0].l
		rate := Rate{}
		if l.coded != nil {
			rate = l.coded.rate
		} else {
			if at >= len(v) {
				return errShortReply
			}
			if err := replyError(v[at:]); err != nil {
				for _, cl := range g {
					cl.err = err
				}
				at++
				continue
			}
			if at+5 > len(v) {
				return errShortReply
			}
			rate, at = parseRate(v[at+1:at+5]), at+5
		}
		for _, cl := range g {
			if at >= len(v) {
				return errShortReply
			}
			r := &cl.res
			r.Rate, r.at = rate, v[0]
			if n := v[at]; n >= 0 {
				r.Allowed, r.Remaining, r.ResetAfter = true, n, rate.Interval
				r.Grant = Grant{member: cl.member, state: grantDecided}
				at++
				continue
			}
			if at+2 >= len(v) {
				return errShortReply
			}
			retry := v[at+1]
			switch {
			case retry == -1:
				cl.err = fmt.Errorf("%w: %d permits, rate %d", ErrPermitsExceedRate, cl.permits, rate.Permits)
			case retry == -2:
				cl.err = fmt.Errorf("%w: a key of limiter %q holds another type of value", ErrInvalidConfig, l.name)
			case retry < -2:
				retry, r.bound = -2-retry, true
			}
			r.Remaining = -1 - v[at]
			r.RetryAfter = time.Duration(retry) * time.Millisecond
			r.ResetAfter = time.Duration(v[at+2]) * time.Millisecond
			at += 3
		}
	}
	return nil
}

var errShortReply = errors.New("core: script reply too short")

// replyError maps the status code that starts v to this package's errors:
// nil for OK, an error for any other code, known or not.
func replyError(v []int64) error {
	if len(v) == 0 {
		return errShortReply
	}
	switch v[0] {
	case codeOK:
		return nil
	case codeNotInitialized:
		return ErrNotInitialized
	case codeInvalidConfig:
		return ErrInvalidConfig
	case codeExceeds:
		return ErrPermitsExceedRate
	}
	return fmt.Errorf("core: unknown script reply code %d", v[0])
}

// parseRate reads {rate, interval ms, type, keepAlive ms}.
func parseRate(v []int64) Rate {
	return Rate{
		Type:      RateType(v[2]),
		Permits:   v[0],
		Interval:  time.Duration(v[1]) * time.Millisecond,
		KeepAlive: time.Duration(v[3]) * time.Millisecond,
	}
}
