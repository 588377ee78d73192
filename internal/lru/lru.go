// Package lru is a bounded map of string keys to values, safe for
// concurrent use: sharded, each shard locked on its own, the least recently
// used key of a full shard going first. Every operation costs O(1): there
// is no sweep, so a flood of keys costs the caller a bounded amount of
// memory and no upkeep.
package lru

import (
	"hash/maphash"
	"strings"
	"sync"
)

// shards is the number of shards; a key's shard is its hash.
const shards = 16

// Map holds at most its capacity of keys.
type Map[V any] struct {
	shards [shards]Shard[V]
	seed   maphash.Seed
}

// Shard is one part of a Map, with its own lock. Lock returns a key's
// value with its shard locked; the caller unlocks it.
type Shard[V any] struct {
	mu    sync.Mutex
	keys  map[string]*entry[V]
	max   int
	head  *entry[V] // most recently used
	tail  *entry[V] // least recently used
	count int
}

type entry[V any] struct {
	key        string
	value      V
	prev, next *entry[V]
}

// New returns a Map that keeps at most capacity keys (at least one per
// shard).
func New[V any](capacity int) *Map[V] {
	m := &Map[V]{seed: maphash.MakeSeed()}
	per := max(capacity/shards, 1)
	for i := range m.shards {
		m.shards[i] = Shard[V]{keys: make(map[string]*entry[V]), max: per}
	}
	return m
}

// shard returns the shard of key.
func (m *Map[V]) shard(key string) *Shard[V] {
	return &m.shards[maphash.String(m.seed, key)%shards]
}

// Lock locks the shard of key and returns the key's value, most recently
// used now, and the shard to unlock. With create, a missing key is added
// with the zero value (making room by dropping the shard's least recently
// used key), and added reports it; without, a missing key gives nil. The
// value may be read and changed until Unlock.
func (m *Map[V]) Lock(key string, create bool) (v *V, added bool, s *Shard[V]) {
	s = m.shard(key)
	s.mu.Lock()
	if e, ok := s.keys[key]; ok {
		s.unlink(e)
		s.push(e)
		return &e.value, false, s
	}
	if !create {
		return nil, false, s
	}
	if s.count >= s.max {
		old := s.tail
		s.unlink(old)
		delete(s.keys, old.key)
		s.count--
	}
	key = strings.Clone(key) // the caller's may be a view of memory it reuses
	e := &entry[V]{key: key}
	s.keys[key] = e
	s.push(e)
	s.count++
	return &e.value, true, s
}

// Unlock unlocks s.
func (s *Shard[V]) Unlock() { s.mu.Unlock() }

// Delete removes key from s, whose lock is held.
func (s *Shard[V]) Delete(key string) {
	if e, ok := s.keys[key]; ok {
		s.unlink(e)
		delete(s.keys, key)
		s.count--
	}
}

// Len returns the number of keys kept.
func (m *Map[V]) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}

func (s *Shard[V]) push(e *entry[V]) {
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
}

func (s *Shard[V]) unlink(e *entry[V]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}
