package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/ops"
	"github.com/redlimit/redlimit/policy"
)

// check says whether Redis can decide for client.
func (c *config) check(ctx context.Context, client *core.Client, stdout io.Writer) error {
	err := client.Check(ctx)
	if c.json {
		out := struct {
			OK    bool   `json:"ok"`
			Redis string `json:"redis"`
			Error string `json:"error,omitempty"`
		}{OK: err == nil, Redis: c.addr}
		if err != nil {
			out.Error = c.redact(err.Error())
		}
		if werr := printJSON(stdout, out); werr != nil {
			return werr
		}
	} else if err == nil {
		fmt.Fprintf(stdout, "ok: redis at %s can decide\n", c.addr)
	}
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	return nil
}

// policy returns the policy c names, on client. Its calls have the whole
// -timeout each.
func (c *config) policy(client *core.Client) (*policy.Policy, error) {
	timeout := policy.WithTimeout(c.timeout)
	switch {
	case c.concurrency != 0:
		return policy.NewConcurrency(client, c.name, c.concurrency, timeout)
	case c.quota != "":
		q, err := parseQuota(c.quota)
		if err != nil {
			return nil, err
		}
		return policy.NewQuota(client, c.name, q, timeout)
	}
	r := core.PerSecond(1) // for ls, which lists the keys under the name whatever the limit
	if c.rate != "" {
		var err error
		if r, err = core.ParseRate(c.rate); err != nil {
			return nil, usagef("-rate %q: %w", c.rate, err)
		}
	}
	return policy.New(client, c.name, r, timeout)
}

// operate runs the command of c on the policy p.
func (c *config) operate(ctx context.Context, p *policy.Policy, stdout io.Writer) error {
	if c.command == "ls" {
		return c.ls(ctx, p, stdout)
	}
	key := c.args[0]
	switch c.command {
	case "peek":
		return c.peek(ctx, p, key, stdout)
	case "reset":
		if err := p.Reset(ctx, key); err != nil {
			return c.failed(key, err)
		}
		return c.print(stdout, map[string]any{"policy": c.name, "key": key, "reset": true},
			fmt.Sprintf("%s %s: reset\n", c.name, key))
	case "override get":
		limit, ok, err := p.Override(ctx, key)
		switch {
		case err != nil:
			return c.failed(key, err)
		case !ok:
			return c.print(stdout, ops.Override{Policy: c.name, Key: key}, fmt.Sprintf("%s %s: no override\n", c.name, key))
		}
		return c.printOverride(stdout, key, limit)
	case "override set":
		limit, _ := strconv.ParseInt(c.args[1], 10, 64) // validated
		if err := p.SetOverride(ctx, key, limit); err != nil {
			return c.failed(key, err)
		}
		return c.printOverride(stdout, key, limit)
	default: // override rm
		if err := p.DeleteOverride(ctx, key); err != nil {
			return c.failed(key, err)
		}
		return c.print(stdout, ops.Override{Policy: c.name, Key: key}, fmt.Sprintf("%s %s: override removed\n", c.name, key))
	}
}

// failed returns the error err of the command on key.
func (c *config) failed(key string, err error) error {
	return fmt.Errorf("%s %s: %w", c.command, key, err)
}

func (c *config) ls(ctx context.Context, p *policy.Policy, stdout io.Writer) error {
	keys, err := ops.ListKeys(ctx, p, c.name, c.limit)
	if err != nil {
		return fmt.Errorf("ls: %w", err)
	}
	if c.json {
		return printJSON(stdout, keys)
	}
	for _, k := range keys.Keys {
		fmt.Fprintln(stdout, k)
	}
	if keys.Truncated {
		fmt.Fprintf(stdout, "(the first %d keys: -limit 0 lists them all)\n", c.limit)
	}
	return nil
}

func (c *config) peek(ctx context.Context, p *policy.Policy, key string, stdout io.Writer) error {
	s, err := ops.Peek(ctx, p, c.name, key)
	if err != nil {
		return c.failed(key, err)
	}
	if c.json {
		return printJSON(stdout, s)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "policy\t%s\n", s.Policy)
	fmt.Fprintf(w, "key\t%s\n", s.Key)
	fmt.Fprintf(w, "allowed\t%v\n", s.Allowed)
	if s.IntervalMS == 0 {
		fmt.Fprintf(w, "remaining\t%d of %d in flight\n", s.Remaining, s.Limit)
	} else {
		fmt.Fprintf(w, "remaining\t%d of %s\n", s.Remaining, c.limitOf(s.Limit, s.IntervalMS))
		fmt.Fprintf(w, "retry after\t%v\n", time.Duration(s.RetryAfterMS)*time.Millisecond)
		fmt.Fprintf(w, "full after\t%v\n", time.Duration(s.ResetAfterMS)*time.Millisecond)
	}
	if s.Override == nil {
		fmt.Fprintf(w, "override\tnone\n")
	} else {
		fmt.Fprintf(w, "override\t%s\n", c.limitOf(*s.Override, s.IntervalMS))
	}
	return w.Flush()
}

// limitOf writes a limit of a rate of the interval ms as a rate, "5/m", a
// quota's as a quota, "1000/day", and a concurrency limit's as a number.
func (c *config) limitOf(limit, ms int64) string {
	if q, err := parseQuota(c.quota); err == nil {
		return strconv.FormatInt(limit, 10) + "/" + strings.ToLower(q.Period.String())
	}
	if ms == 0 {
		return strconv.FormatInt(limit, 10)
	}
	b, err := core.Rate{Permits: limit, Interval: time.Duration(ms) * time.Millisecond}.MarshalText()
	if err != nil {
		return strconv.FormatInt(limit, 10)
	}
	return string(b)
}

// printOverride prints key's override limit.
func (c *config) printOverride(stdout io.Writer, key string, limit int64) error {
	r, _ := core.ParseRate(c.rate) // its interval; 0 for a concurrency limit
	return c.print(stdout, ops.Override{Policy: c.name, Key: key, Limit: &limit},
		fmt.Sprintf("%s %s: override %s\n", c.name, key, c.limitOf(limit, r.Interval.Milliseconds())))
}

// print prints v as JSON with -json, and text otherwise.
func (c *config) print(stdout io.Writer, v any, text string) error {
	if c.json {
		return printJSON(stdout, v)
	}
	_, err := io.WriteString(stdout, text)
	return err
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
