package lru

import (
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeastRecentlyUsedGoesFirst(t *testing.T) {
	m := New[int](shards * 2) // two keys per shard
	s := m.shard("a")
	// Three keys of one shard: the least recently used of them goes.
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		if k := strconv.Itoa(i); m.shard(k) == s {
			keys = append(keys, k)
		}
	}
	for i, k := range keys[:2] {
		v, added, sh := m.Lock(k, true)
		require.True(t, added)
		*v = i + 1
		sh.Unlock()
	}
	_, _, sh := m.Lock(keys[0], false) // keys[0] is used: keys[1] is the least recent
	sh.Unlock()
	v, added, sh := m.Lock(keys[2], true)
	require.True(t, added)
	*v = 3
	sh.Unlock()

	v, _, sh = m.Lock(keys[0], false)
	require.NotNil(t, v)
	assert.Equal(t, 1, *v)
	sh.Unlock()
	v, _, sh = m.Lock(keys[1], false)
	assert.Nil(t, v, "the least recently used key was dropped")
	sh.Unlock()

	_, _, sh = m.Lock(keys[0], false)
	sh.Delete(keys[0])
	sh.Unlock()
	v, _, sh = m.Lock(keys[0], false)
	assert.Nil(t, v)
	sh.Unlock()
	assert.Equal(t, 1, m.Len())
}

func TestBounded(t *testing.T) {
	m := New[int](1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10_000 {
				v, _, s := m.Lock(strconv.Itoa(g*10_000+i), true)
				*v++
				s.Unlock()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, m.Len(), 1000)
	assert.Greater(t, m.Len(), 900, "a shard drops keys only when full")
}
