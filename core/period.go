package core

import (
	"fmt"
	"time"
)

// Period is the calendar period over which a Quota counts.
type Period int

const (
	// Day runs from midnight to midnight: 23 or 25 hours on the days
	// clocks change.
	Day Period = iota + 1
	// Week is the ISO week: Monday 00:00 to the next Monday 00:00.
	Week
	// Month runs from the first of the month 00:00 to the first of the
	// next.
	Month
)

// String returns "Day", "Week" or "Month".
func (p Period) String() string {
	switch p {
	case Day:
		return "Day"
	case Week:
		return "Week"
	case Month:
		return "Month"
	}
	return fmt.Sprintf("Period(%d)", int(p))
}

// Quota is a budget of Limit permits per calendar Period in Location's
// calendar: a Day quota of 1 000 allows 1 000 permits from one midnight to
// the next, whatever their pace, and all of it again from that midnight.
// See WithQuota.
type Quota struct {
	// Limit is the number of permits per period, from 1 to MaxPermits.
	Limit int64
	// Period is Day, Week or Month.
	Period Period
	// Location is the time zone of the calendar; nil means UTC. A period
	// begins at midnight in it: a Day is 23 or 25 hours long on the days
	// its clocks change, and where midnight is skipped the day begins
	// when it ends.
	Location *time.Location
}

// Validate reports whether q is a valid quota: Limit in [1, MaxPermits]
// and a known Period. Its errors wrap ErrInvalidRate.
func (q Quota) Validate() error {
	switch {
	case q.Limit < 1 || q.Limit > MaxPermits:
		return fmt.Errorf("%w: quota limit %d not in [1, %d]", ErrInvalidRate, q.Limit, int64(MaxPermits))
	case q.Period < Day || q.Period > Month:
		return fmt.Errorf("%w: unknown quota period %v", ErrInvalidRate, q.Period)
	}
	return nil
}

// bounds returns the period of q that holds the instant ms (Unix ms): its
// start and the start of the next, in Unix ms. A period begins at the
// first instant of its first date in q.Location, and ends where the next
// begins, so periods follow each other with neither gap nor overlap, even
// where clocks are set back across midnight (the hour that repeats a date
// belongs to the period that began first).
func (q Quota) bounds(ms int64) (start, end int64) {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	first := q.Period.first(civilDay(time.UnixMilli(ms).In(loc)))
	for range 4 {
		next := q.Period.next(first)
		s, e := firstInstant(first, loc).UnixMilli(), firstInstant(next, loc).UnixMilli()
		if ms < e {
			return s, e
		}
		// Clocks set back across midnight: the next period began
		// before this date ended.
		first = next
	}
	// No time zone sets its clocks back by days: not reached.
	return ms, ms + 1
}

// A civil day is a date, counted in days from 1970-01-01.

// civilDay returns the date of t, in t's location, as a civil day.
func civilDay(t time.Time) int64 {
	y, m, d := t.Date()
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86_400)
}

// civilDate returns the year, month and day of civil day n.
func civilDate(n int64) (int, time.Month, int) {
	return time.Unix(n*86_400, 0).UTC().Date()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// first returns the first date of the period of p that holds day.
func (p Period) first(day int64) int64 {
	switch p {
	case Week:
		// 1970-01-01 was a Thursday: (day+3) mod 7 counts from Monday.
		return day - (day + 3 - floorDiv(day+3, 7)*7)
	case Month:
		y, m, _ := civilDate(day)
		return civilDay(time.Date(y, m, 1, 0, 0, 0, 0, time.UTC))
	}
	return day
}

// next returns the first date of the period after the one that begins on
// first.
func (p Period) next(first int64) int64 {
	switch p {
	case Week:
		return first + 7
	case Month:
		y, m, _ := civilDate(first)
		return civilDay(time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC))
	}
	return first + 1
}

// firstInstant returns the first instant whose date in loc is day: its
// midnight, or, where clocks skip midnight, the instant they skip it; and
// where they are set back across midnight, so that the date begins twice,
// the first time.
func firstInstant(day int64, loc *time.Location) time.Time {
	y, m, d := civilDate(day)
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if civilDay(t) < day {
		// Midnight does not exist (time.Date took it in the zone before
		// the change): the date begins when that zone ends.
		_, t = t.ZoneBounds()
	}
	// The zones before t may hold instants of the date too, when clocks
	// were set back across midnight: the date begins in the first.
	for range 4 {
		zoneStart, _ := t.ZoneBounds()
		if zoneStart.IsZero() {
			break
		}
		before := zoneStart.Add(-time.Nanosecond)
		if civilDay(before) < day {
			break
		}
		_, offset := before.Zone()
		t = time.Unix(day*86_400-int64(offset), 0).In(loc)
		if prevStart, _ := before.ZoneBounds(); !prevStart.IsZero() && t.Before(prevStart) {
			t = prevStart // that zone began after midnight: the date was on
		}
	}
	return t
}
