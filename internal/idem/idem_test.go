package idem

import "testing"

func TestCache(t *testing.T) {
	c := New[string](100, 32)
	steps := []struct {
		name            string
		put             bool
		scope, id       string
		fp              uint64
		at              int64
		want            string
		found, conflict bool
	}{
		{"unknown", false, "api", "r1", 7, 0, "", false, false},
		{"stored", true, "api", "r1", 7, 0, "first", false, false},
		{"the same request", false, "api", "r1", 7, 50, "first", true, false},
		{"another request, same id", false, "api", "r1", 8, 50, "", true, true},
		{"another scope", false, "web", "r1", 7, 50, "", false, false},
		{"expired at ttl", false, "api", "r1", 7, 100, "", false, false},
	}
	for i, s := range steps {
		if s.put {
			c.Put(s.scope, s.id, s.fp, s.at, "first")
			continue
		}
		v, found, conflict := c.Get(s.scope, s.id, s.fp, s.at)
		if v != s.want || found != s.found || conflict != s.conflict {
			t.Fatalf("step %d (%s): got %q %v %v, want %q %v %v", i, s.name, v, found, conflict, s.want, s.found, s.conflict)
		}
	}
	// bounded: far more ids than the bound keep at most the bound
	for i := range 10_000 {
		c.Put("api", string(rune('a'+i%26))+string(rune(i)), 1, 0, "x")
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > 32 {
		t.Fatalf("%d ids kept, bound 32", n)
	}
}

// TestCacheSweep: Sweep removes exactly the ids expired by now, and Len
// counts what is held.
func TestCacheSweep(t *testing.T) {
	c := New[int](100, 1024)
	for i := range 40 {
		c.Put("api", string(rune('a'+i)), 1, int64(i), i) // expires at i+100
	}
	steps := []struct {
		now  int64
		want int
	}{
		{99, 40},  // none expired yet
		{100, 39}, // the first expires at its ttl
		{120, 19},
		{139, 0},
	}
	for i, s := range steps {
		c.Sweep(s.now)
		if got := c.Len(); got != s.want {
			t.Fatalf("step %d: after Sweep(%d) got %d ids, want %d", i, s.now, got, s.want)
		}
	}
}
