package main

import "context"

type completionKey struct{}

func withCompletion(ctx context.Context, c completion) context.Context {
	return context.WithValue(ctx, completionKey{}, c)
}

func completionOf(ctx context.Context) (completion, bool) {
	c, ok := ctx.Value(completionKey{}).(completion)
	return c, ok
}
