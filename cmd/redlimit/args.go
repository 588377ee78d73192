package main

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
)

const usage = `Usage: redlimit [flags] COMMAND [ARGS]

See and change the limits an application's policies keep in Redis.

Commands:
  check                    whether Redis can decide: exit status 0 if so, 1 (and why) if not
  ls                       the keys of the policy with state in Redis
  peek KEY                 what KEY's next request would get now, taking nothing
  reset KEY                forget KEY's state in Redis: every process serves it again within a second
  override get KEY         KEY's own limit, if it has one
  override set KEY LIMIT   give KEY the limit LIMIT, per the policy's own interval
  override rm KEY          remove KEY's own limit: it has the policy's again

Flags, anywhere before "--":
  -redis URL         Redis: redis://[[user]:password@]host:port[/db], or rediss:// for TLS
                     (default $REDIS_URL)
  -cluster           the URL is a Redis Cluster's, more nodes in addr=:
                     redis://host1:6379?addr=host2:6379&addr=host3:6379
  -prefix PREFIX     the application's key prefix (core.WithKeyPrefix), if any
  -policy NAME       the policy's name
  -rate RATE         the policy's rate, such as 100/m or 5/10s (core.ParseRate)
  -concurrency N     or its limit of N requests in flight per key
  -quota QUOTA       or its quota per calendar period: 1000/day, 500/week or 20000/month,
                     in UTC, or in the time zone that follows: "1000/day Europe/Paris"
  -json              print JSON
  -limit N           ls: at most N keys (default 1000; 0 lists them all)
  -timeout D         give up after D (default 10s)

Name the policy as the application does: the same -prefix, -policy and limit (-rate,
-concurrency or -quota), which peek, reset and override need; ls needs -policy only, and check no
policy. A key is the request's key as the key functions return it: "alice", ":ip:192.0.2.1"
for a request without one, limited by its address, or a long key's hash as ls lists it. Put
"--" before a key that begins with "-".

Exit status: 0 done, 1 Redis failed or refused (or check found that it cannot decide),
2 a mistake in the command line.
`

// config is a command line.
type config struct {
	redisURL    string
	cluster     bool
	prefix      string
	name        string // the policy's
	rate        string
	concurrency int64
	quota       string
	json        bool
	limit       int
	timeout     time.Duration

	command string   // "check", "ls", "peek", "reset", "override get", ...
	args    []string // the command's
	addr    string   // Redis's address (a Cluster's, joined by ", "), once the URL is parsed
	secret  string   // the URL's password, once parsed: never printed
}

// parse parses the command line args; its errors are usageErrors, or
// flag.ErrHelp.
func parse(args []string, getenv func(string) string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("redlimit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.redisURL, "redis", getenv("REDIS_URL"), "")
	fs.BoolVar(&c.cluster, "cluster", false, "")
	fs.StringVar(&c.prefix, "prefix", "", "")
	fs.StringVar(&c.name, "policy", "", "")
	fs.StringVar(&c.rate, "rate", "", "")
	fs.Int64Var(&c.concurrency, "concurrency", 0, "")
	fs.StringVar(&c.quota, "quota", "", "")
	fs.BoolVar(&c.json, "json", false, "")
	fs.IntVar(&c.limit, "limit", 1000, "")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "")
	words, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, usagef("no command: check, ls, peek, reset or override")
	}
	if words[0] == "help" {
		return nil, flag.ErrHelp
	}
	c.command, words = words[0], words[1:]
	if c.command == "override" {
		if len(words) == 0 {
			return nil, usagef("override needs get, set or rm")
		}
		c.command, words = "override "+words[0], words[1:]
	}
	c.args = words
	return c, c.validate()
}

// parseFlags parses the flags of args into fs, wherever they are, and
// returns the other arguments, those after "--" included.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err == flag.ErrHelp {
			return nil, err
		} else if err != nil {
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(words, rest...), nil
		}
		words, args = append(words, rest[0]), rest[1:]
	}
}

// validate says what is wrong with c, before any I/O.
func (c *config) validate() error {
	want := map[string]int{"check": 0, "ls": 0, "peek": 1, "reset": 1, "override get": 1, "override set": 2, "override rm": 1}
	n, ok := want[c.command]
	switch {
	case !ok:
		return usagef("unknown command %q: check, ls, peek, reset, or override get, set or rm", c.command)
	case len(c.args) != n:
		return usagef("%s takes %d argument(s), not %d: %q", c.command, n, len(c.args), c.args)
	case c.redisURL == "":
		return usagef("no Redis: give -redis URL, or set REDIS_URL")
	case c.timeout <= 0:
		return usagef("-timeout %v: a positive duration", c.timeout)
	case c.limit < 0:
		return usagef("-limit %d: 0 (all) or more", c.limit)
	case c.command == "check":
		return nil
	case c.name == "":
		return usagef("%s needs the policy's name: -policy NAME", c.command)
	case limits(c.rate != "", c.concurrency != 0, c.quota != "") > 1:
		return usagef("more than one of -rate, -concurrency and -quota: a policy has one limit")
	case limits(c.rate != "", c.concurrency != 0, c.quota != "") == 0 && c.command != "ls":
		return usagef("%s needs the policy's limit, as the application gives it: -rate RATE, -concurrency N or -quota QUOTA", c.command)
	case n > 0 && c.args[0] == "":
		return usagef("an empty key")
	case c.command == "override set":
		if v, err := strconv.ParseInt(c.args[1], 10, 64); err != nil || v < 1 {
			return usagef("override set: LIMIT %q: a whole number of permits (or slots), 1 or more", c.args[1])
		}
	}
	return nil
}

// limits returns how many of the limit flags are given.
func limits(given ...bool) int {
	n := 0
	for _, g := range given {
		if g {
			n++
		}
	}
	return n
}

// periods are the calendar periods of -quota, by name.
var periods = map[string]core.Period{"day": core.Day, "week": core.Week, "month": core.Month}

// parseQuota parses -quota: LIMIT/PERIOD (day, week or month), then
// optionally a time zone (time.LoadLocation); without one, UTC.
func parseQuota(s string) (core.Quota, error) {
	fields := strings.Fields(s)
	var limit, period string
	if len(fields) > 0 && len(fields) <= 2 {
		limit, period, _ = strings.Cut(fields[0], "/")
	}
	if period == "" {
		return core.Quota{}, usagef("-quota %q: LIMIT/PERIOD, such as 1000/day, then maybe a time zone", s)
	}
	var q core.Quota
	var err error
	if q.Limit, err = strconv.ParseInt(limit, 10, 64); err != nil {
		return core.Quota{}, usagef("-quota %q: the limit %q is not a whole number", s, limit)
	}
	if q.Period = periods[strings.ToLower(period)]; q.Period == 0 {
		return core.Quota{}, usagef("-quota %q: the period %q is not day, week or month", s, period)
	}
	if len(fields) == 2 {
		if q.Location, err = time.LoadLocation(fields[1]); err != nil {
			return core.Quota{}, usagef("-quota %q: time zone: %w", s, err)
		}
	}
	if err := q.Validate(); err != nil {
		return core.Quota{}, usagef("-quota %q: %w", s, err)
	}
	return q, nil
}
