package core_test

import (
	"errors"
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the same zones whatever the system has

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// at parses a local time "2006-01-02 15:04" in loc.
func at(t testing.TB, loc *time.Location, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	require.NoError(t, err)
	return v
}

// utc parses "2006-01-02 15:04" in UTC.
func utc(t testing.TB, s string) time.Time { return at(t, time.UTC, s) }

// The period that holds an instant, by the calendar of the quota's zone:
// its start and the start of the next, and so its length.
func TestPeriodBounds(t *testing.T) {
	paris, newYork := zone(t, "Europe/Paris"), zone(t, "America/New_York")
	tokyo, losAngeles := zone(t, "Asia/Tokyo"), zone(t, "America/Los_Angeles")
	kolkata, kathmandu := zone(t, "Asia/Kolkata"), zone(t, "Asia/Kathmandu")
	havana, santiago, stJohns := zone(t, "America/Havana"), zone(t, "America/Santiago"), zone(t, "America/St_Johns")
	tests := []struct {
		name       string
		period     core.Period
		loc        *time.Location // nil: UTC
		t          time.Time
		start, end time.Time
		length     time.Duration
	}{
		// Month lengths and leap years.
		{"February of a leap year", core.Month, nil, utc(t, "2024-02-15 12:00"), utc(t, "2024-02-01 00:00"), utc(t, "2024-03-01 00:00"), 29 * 24 * time.Hour},
		{"February of a common year", core.Month, nil, utc(t, "2023-02-28 23:59"), utc(t, "2023-02-01 00:00"), utc(t, "2023-03-01 00:00"), 28 * 24 * time.Hour},
		{"2100 is not a leap year", core.Month, nil, utc(t, "2100-02-10 00:00"), utc(t, "2100-02-01 00:00"), utc(t, "2100-03-01 00:00"), 28 * 24 * time.Hour},
		{"2000 is a leap year", core.Month, nil, utc(t, "2000-02-29 08:00"), utc(t, "2000-02-01 00:00"), utc(t, "2000-03-01 00:00"), 29 * 24 * time.Hour},
		{"the 29th of February", core.Day, nil, utc(t, "2024-02-29 23:59"), utc(t, "2024-02-29 00:00"), utc(t, "2024-03-01 00:00"), 24 * time.Hour},
		{"January 31", core.Month, nil, utc(t, "2025-01-31 23:59"), utc(t, "2025-01-01 00:00"), utc(t, "2025-02-01 00:00"), 31 * 24 * time.Hour},
		{"the first of February at midnight", core.Month, nil, utc(t, "2025-02-01 00:00"), utc(t, "2025-02-01 00:00"), utc(t, "2025-03-01 00:00"), 28 * 24 * time.Hour},
		{"a 30-day month", core.Month, nil, utc(t, "2025-04-30 12:00"), utc(t, "2025-04-01 00:00"), utc(t, "2025-05-01 00:00"), 30 * 24 * time.Hour},

		// The year's end.
		{"the last day of the year", core.Day, nil, utc(t, "2025-12-31 23:59"), utc(t, "2025-12-31 00:00"), utc(t, "2026-01-01 00:00"), 24 * time.Hour},
		{"December", core.Month, nil, utc(t, "2025-12-31 23:59"), utc(t, "2025-12-01 00:00"), utc(t, "2026-01-01 00:00"), 31 * 24 * time.Hour},
		{"the week across the new year", core.Week, nil, utc(t, "2025-12-31 12:00"), utc(t, "2025-12-29 00:00"), utc(t, "2026-01-05 00:00"), 7 * 24 * time.Hour},
		{"the new year's first instant", core.Day, nil, utc(t, "2026-01-01 00:00"), utc(t, "2026-01-01 00:00"), utc(t, "2026-01-02 00:00"), 24 * time.Hour},

		// ISO weeks, Monday to Monday; week 53.
		{"ISO week 53 of 2026", core.Week, nil, utc(t, "2026-12-31 10:00"), utc(t, "2026-12-28 00:00"), utc(t, "2027-01-04 00:00"), 7 * 24 * time.Hour},
		{"ISO week 53 of 2026, on its Sunday in 2027", core.Week, nil, utc(t, "2027-01-03 23:59"), utc(t, "2026-12-28 00:00"), utc(t, "2027-01-04 00:00"), 7 * 24 * time.Hour},
		{"ISO week 53 of 2020", core.Week, nil, utc(t, "2021-01-01 00:00"), utc(t, "2020-12-28 00:00"), utc(t, "2021-01-04 00:00"), 7 * 24 * time.Hour},
		{"ISO week 1 of 2027", core.Week, nil, utc(t, "2027-01-04 00:00"), utc(t, "2027-01-04 00:00"), utc(t, "2027-01-11 00:00"), 7 * 24 * time.Hour},
		{"a Monday at midnight", core.Week, nil, utc(t, "2025-06-02 00:00"), utc(t, "2025-06-02 00:00"), utc(t, "2025-06-09 00:00"), 7 * 24 * time.Hour},
		{"a Sunday just before midnight", core.Week, nil, at(t, time.UTC, "2025-06-08 23:59"), utc(t, "2025-06-02 00:00"), utc(t, "2025-06-09 00:00"), 7 * 24 * time.Hour},

		// The same instant, Sunday 2025-06-01 20:00 UTC, is Monday east of
		// UTC and Sunday west of it.
		{"east of UTC: Monday already", core.Week, tokyo, utc(t, "2025-06-01 20:00"), at(t, tokyo, "2025-06-02 00:00"), at(t, tokyo, "2025-06-09 00:00"), 7 * 24 * time.Hour},
		{"west of UTC: still Sunday", core.Week, losAngeles, utc(t, "2025-06-01 20:00"), at(t, losAngeles, "2025-05-26 00:00"), at(t, losAngeles, "2025-06-02 00:00"), 7 * 24 * time.Hour},
		{"east of UTC: Monday's midnight, Sunday in UTC", core.Week, tokyo, utc(t, "2025-06-01 15:00"), at(t, tokyo, "2025-06-02 00:00"), at(t, tokyo, "2025-06-09 00:00"), 7 * 24 * time.Hour},
		{"west of UTC: Monday's midnight, Monday 07:00 in UTC", core.Week, losAngeles, utc(t, "2025-06-02 07:00"), at(t, losAngeles, "2025-06-02 00:00"), at(t, losAngeles, "2025-06-09 00:00"), 7 * 24 * time.Hour},

		// Days of 23 and 25 hours: a Day spans them exactly.
		{"Paris, spring forward", core.Day, paris, at(t, paris, "2025-03-30 12:00"), utc(t, "2025-03-29 23:00"), utc(t, "2025-03-30 22:00"), 23 * time.Hour},
		{"Paris, fall back", core.Day, paris, at(t, paris, "2025-10-26 12:00"), utc(t, "2025-10-25 22:00"), utc(t, "2025-10-26 23:00"), 25 * time.Hour},
		{"Paris, the repeated hour", core.Day, paris, utc(t, "2025-10-26 00:30"), utc(t, "2025-10-25 22:00"), utc(t, "2025-10-26 23:00"), 25 * time.Hour},
		{"Paris, the day before", core.Day, paris, at(t, paris, "2025-03-29 23:59"), utc(t, "2025-03-28 23:00"), utc(t, "2025-03-29 23:00"), 24 * time.Hour},
		{"Paris, the week of the change", core.Week, paris, at(t, paris, "2025-03-27 12:00"), at(t, paris, "2025-03-24 00:00"), at(t, paris, "2025-03-31 00:00"), 7*24*time.Hour - time.Hour},
		{"Paris, the month of the change", core.Month, paris, at(t, paris, "2025-10-31 23:00"), at(t, paris, "2025-10-01 00:00"), at(t, paris, "2025-11-01 00:00"), 31*24*time.Hour + time.Hour},
		{"New York, spring forward", core.Day, newYork, at(t, newYork, "2025-03-09 01:59"), utc(t, "2025-03-09 05:00"), utc(t, "2025-03-10 04:00"), 23 * time.Hour},
		{"New York, fall back", core.Day, newYork, at(t, newYork, "2025-11-02 23:00"), utc(t, "2025-11-02 04:00"), utc(t, "2025-11-03 05:00"), 25 * time.Hour},
		{"New York, the repeated hour", core.Day, newYork, utc(t, "2025-11-02 06:30"), utc(t, "2025-11-02 04:00"), utc(t, "2025-11-03 05:00"), 25 * time.Hour},

		// Offsets of a half and three quarters of an hour.
		{"Kolkata, +05:30", core.Day, kolkata, utc(t, "2025-01-15 18:29"), utc(t, "2025-01-14 18:30"), utc(t, "2025-01-15 18:30"), 24 * time.Hour},
		{"Kolkata, its midnight", core.Day, kolkata, utc(t, "2025-01-15 18:30"), utc(t, "2025-01-15 18:30"), utc(t, "2025-01-16 18:30"), 24 * time.Hour},
		{"Kathmandu, +05:45", core.Day, kathmandu, utc(t, "2025-01-15 18:14"), utc(t, "2025-01-14 18:15"), utc(t, "2025-01-15 18:15"), 24 * time.Hour},
		{"Kathmandu, a week", core.Week, kathmandu, utc(t, "2025-01-12 18:15"), utc(t, "2025-01-12 18:15"), utc(t, "2025-01-19 18:15"), 7 * 24 * time.Hour},
		{"Kathmandu, a month", core.Month, kathmandu, utc(t, "2025-01-31 18:14"), utc(t, "2024-12-31 18:15"), utc(t, "2025-01-31 18:15"), 31 * 24 * time.Hour},

		// Where clocks skip midnight, the day begins when they skip it.
		{"Havana skips midnight", core.Day, havana, at(t, havana, "2025-03-09 12:00"), utc(t, "2025-03-09 05:00"), utc(t, "2025-03-10 04:00"), 23 * time.Hour},
		{"Havana, the day before", core.Day, havana, utc(t, "2025-03-09 04:59"), utc(t, "2025-03-08 05:00"), utc(t, "2025-03-09 05:00"), 24 * time.Hour},
		{"Santiago skips midnight", core.Day, santiago, at(t, santiago, "2025-09-07 01:00"), utc(t, "2025-09-07 04:00"), utc(t, "2025-09-08 03:00"), 23 * time.Hour},
		{"Santiago, the week of the change", core.Week, santiago, at(t, santiago, "2025-09-05 12:00"), at(t, santiago, "2025-09-01 00:00"), at(t, santiago, "2025-09-08 00:00"), 7*24*time.Hour - time.Hour},
		// St. John's set its clocks back from 00:01 to 23:01 the day
		// before: the date 2000-10-29 began at 00:00 NDT, and its day
		// holds the repeated hour.
		{"St. John's, the day that began twice", core.Day, stJohns, utc(t, "2000-10-29 03:00"), utc(t, "2000-10-29 02:30"), utc(t, "2000-10-30 03:30"), 25 * time.Hour},
		{"St. John's, the day before ends at its first midnight", core.Day, stJohns, utc(t, "2000-10-29 02:29"), utc(t, "2000-10-28 02:30"), utc(t, "2000-10-29 02:30"), 24 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := core.Quota{Limit: 1, Period: tc.period, Location: tc.loc}
			start, end := core.QuotaBounds(q, tc.t)
			assert.True(t, start.Equal(tc.start), "start %v, want %v", start, tc.start)
			assert.True(t, end.Equal(tc.end), "end %v, want %v", end, tc.end)
			assert.Equal(t, tc.length, end.Sub(start), "length")
			assert.False(t, tc.t.Before(start), "the period holds the instant")
			assert.True(t, tc.t.Before(end), "the period holds the instant")
		})
	}
	_, week := utc(t, "2026-12-31 10:00").ISOWeek()
	assert.Equal(t, 53, week, "2026 has an ISO week 53")
}

// Whatever the zone and the instant, periods follow each other with
// neither gap nor overlap, each holds the instants it is asked for, and
// begins at midnight but where clocks skip it. Checked around every
// change of clocks from 2000 to 2030 in zones with all kinds of changes.
func TestPeriodsTileTime(t *testing.T) {
	zones := []string{"UTC", "Europe/Paris", "Europe/London", "America/New_York", "America/St_Johns",
		"America/Havana", "America/Santiago", "America/Asuncion", "America/Sao_Paulo", "Asia/Beirut",
		"Africa/Casablanca", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Apia",
		"Pacific/Chatham", "Antarctica/Casey", "Asia/Tehran", "Africa/Cairo", "Europe/Moscow"}
	from, to := utc(t, "2000-01-01 00:00"), utc(t, "2030-01-01 00:00")
	for _, name := range zones {
		loc := zone(t, name)
		var instants []time.Time
		for at := from; at.Before(to); at = at.Add(241 * time.Hour) {
			instants = append(instants, at)
		}
		for at := from; ; {
			_, change := at.In(loc).ZoneBounds()
			if change.IsZero() || !change.Before(to) {
				break
			}
			for _, d := range []time.Duration{-25 * time.Hour, -time.Hour, -time.Millisecond, 0, time.Hour, 25 * time.Hour} {
				instants = append(instants, change.Add(d))
			}
			at = change
		}
		for _, p := range []core.Period{core.Day, core.Week, core.Month} {
			q := core.Quota{Limit: 1, Period: p, Location: loc}
			for _, x := range instants {
				if err := checkPeriod(q, x); err != nil {
					t.Errorf("%s %v at %v: %v", name, p, x, err)
					return
				}
			}
		}
	}
}

// checkPeriod checks the period of q that holds x: see TestPeriodsTileTime.
func checkPeriod(q core.Quota, x time.Time) error {
	start, end := core.QuotaBounds(q, x)
	if x.Before(start) || !x.Before(end) {
		return fmt.Errorf("not in [%v, %v)", start, end)
	}
	if s, e := core.QuotaBounds(q, start); !s.Equal(start) || !e.Equal(end) {
		return fmt.Errorf("the period of its start %v is [%v, %v)", start, s, e)
	}
	if s, _ := core.QuotaBounds(q, end); !s.Equal(end) {
		return fmt.Errorf("the next period begins at %v, not at its end %v", s, end)
	}
	if s, e := core.QuotaBounds(q, start.Add(-time.Millisecond)); !e.Equal(start) || !s.Before(start) {
		return fmt.Errorf("the period before, [%v, %v), does not end at its start %v", s, e, start)
	}
	if h, m, _ := start.Clock(); h != 0 || m != 0 {
		// Midnight skipped: the period begins at the change.
		if zs, _ := start.ZoneBounds(); !zs.Equal(start) {
			return fmt.Errorf("%v begins neither at midnight nor at a change of clocks", start)
		}
	}
	days := end.Sub(start).Hours() / 24
	if skip := time.Date(2011, 12, 30, 10, 0, 0, 0, time.UTC); q.Location.String() == "Pacific/Apia" && start.Before(skip) && end.After(skip) {
		days++ // Samoa skipped 2011-12-30, crossing the date line
	}
	switch {
	case q.Period == core.Day && (days < 0.85 || days > 1.15):
		return fmt.Errorf("a day of %v", end.Sub(start))
	case q.Period == core.Week && (days < 6.85 || days > 7.15 || start.Weekday() != time.Monday):
		return fmt.Errorf("a week of %v from %v", end.Sub(start), start)
	case q.Period == core.Month && (days < 27.8 || days > 31.2 || start.Day() != 1):
		return fmt.Errorf("a month of %v from %v", end.Sub(start), start)
	}
	return nil
}

func TestQuotaValidate(t *testing.T) {
	for _, q := range []core.Quota{
		{Limit: 1, Period: core.Day},
		{Limit: core.MaxPermits, Period: core.Month, Location: time.Local},
		{Limit: 10, Period: core.Week, Location: zone(t, "Asia/Kathmandu")},
	} {
		assert.NoError(t, q.Validate(), "%+v", q)
	}
	for _, q := range []core.Quota{
		{Limit: 0, Period: core.Day},
		{Limit: -1, Period: core.Day},
		{Limit: core.MaxPermits + 1, Period: core.Day},
		{Limit: 1},
		{Limit: 1, Period: core.Month + 1},
	} {
		err := q.Validate()
		assert.True(t, errors.Is(err, core.ErrInvalidRate), "%+v: %v", q, err)
	}
	assert.Equal(t, "Day", core.Day.String())
	assert.Equal(t, "Week", core.Week.String())
	assert.Equal(t, "Month", core.Month.String())
	assert.Equal(t, "Period(0)", core.Period(0).String())
}
