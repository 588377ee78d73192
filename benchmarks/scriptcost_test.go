package main

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestLogMember(t *testing.T) {
	a, b := logMember(), logMember()
	if len(a) != 21 || a[0] != 0x10 || binary.LittleEndian.Uint32([]byte(a[17:])) != 1 {
		t.Errorf("logMember() = %x, want 21 bytes: 0x10, 16 random bytes, uint32 1 little-endian", a)
	}
	if a == b {
		t.Errorf("logMember() returned %x twice", a)
	}
}

func TestStraightLine(t *testing.T) {
	if got, want := layouts[7], []string{"{s:7}", "{s:7}:value", "{s:7}:permits"}; !slices.Equal(got, want) {
		t.Errorf("layouts[7] = %q, want %q", got, want)
	}
	// The straight-line script runs exactly these commands, in this order,
	// on keys given in KEYS.
	var calls []string
	for line := range strings.Lines(straightlineSrc) {
		if _, call, ok := strings.Cut(line, "redis.call('"); ok {
			name, _, _ := strings.Cut(call, "'")
			calls = append(calls, name)
		}
	}
	if got, want := strings.Join(calls, " "), "HMGET TIME ZRANGEBYSCORE INCRBY PTTL ZADD"; got != want {
		t.Errorf("straightline.lua calls %s, want %s", got, want)
	}
}
