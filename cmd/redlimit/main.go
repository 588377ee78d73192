// Command redlimit sees and changes the limits that an application's
// policies keep in Redis: whether Redis can decide (check), the keys a
// policy has state for (ls), what a key's next request would get (peek),
// a key's reset (reset), and its own limit (override get, set and rm).
//
//	go run github.com/redlimit/redlimit/cmd/redlimit@latest -h
//	redlimit -redis redis://localhost:6379 -prefix example: -policy user -rate 5/m peek alice
//
// It reaches a policy's state by building the same policy: give it the
// application's key prefix (-prefix, as core.WithKeyPrefix), the policy's
// name (-policy) and its limit (-rate, -concurrency or -quota), since a
// key's state and its override are per the policy's own interval or period. Redis is -redis, or
// $REDIS_URL; a Redis Cluster is -cluster with a URL that names more nodes
// with addr=. No message it prints holds the URL's password.
//
// Errors are one line on the standard error. The exit status is 0 when the
// command did what it says, 1 when Redis failed or refused (or check found
// that Redis cannot decide), and 2 for a mistake in the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

func main() {
	redis.SetLogger(quiet{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run runs the command line args, and returns its exit status.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c, err := parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err == nil {
		err = c.run(stdout)
	}
	if err == nil {
		return 0
	}
	msg := strings.Join(strings.Fields(err.Error()), " ") // one line
	if c != nil {
		msg = c.redact(msg)
	}
	var u usageError
	switch {
	case errors.As(err, &u):
		fmt.Fprintf(stderr, "redlimit: %s (redlimit -h for help)\n", msg)
		return 2
	case errors.Is(err, core.ErrInvalidName), errors.Is(err, core.ErrInvalidPermits),
		errors.Is(err, core.ErrInvalidRate), errors.Is(err, core.ErrInvalidOption):
		fmt.Fprintf(stderr, "redlimit: %s\n", msg)
		return 2
	}
	fmt.Fprintf(stderr, "redlimit: %s\n", msg)
	return 1
}

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError saying what is wrong.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// run runs the command of c.
func (c *config) run(stdout io.Writer) error {
	rdb, err := c.connect()
	if err != nil {
		return err
	}
	defer rdb.Close()
	client, err := core.New(rdb, core.WithKeyPrefix(c.prefix))
	if err != nil {
		return usagef("-prefix %q: %w", c.prefix, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if c.command == "check" {
		return c.check(ctx, client, stdout)
	}
	p, err := c.policy(client)
	if err != nil {
		return err
	}
	return c.operate(ctx, p, stdout)
}
