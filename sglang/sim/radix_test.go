package sim

import "testing"

func ids(v ...int32) []int32 { return v }

func TestRadixMatchInsertSplit(t *testing.T) {
	t.Parallel()
	c := newRadixCache(false)
	if added := c.insert(ids(1, 2, 3, 4, 5)); added != 5 || c.size != 5 {
		t.Fatalf("added %d size %d", added, c.size)
	}
	if added := c.insert(ids(1, 2, 3, 9)); added != 1 || c.size != 6 {
		t.Fatalf("branch added %d size %d", added, c.size)
	}
	if added := c.insert(ids(1, 2)); added != 0 {
		t.Fatalf("existing prefix added %d", added)
	}
	n, node := c.match(ids(1, 2, 3, 4, 7))
	if n != 4 {
		t.Fatalf("match %d, want 4", n)
	}
	// The node ends exactly at the match: locking it protects 4 tokens.
	c.lock(node)
	if c.protected != 4 || c.evictable() != 2 {
		t.Fatalf("protected %d evictable %d", c.protected, c.evictable())
	}
	if freed := c.evict(100); freed != 2 || c.size != 4 {
		t.Fatalf("evicted %d, size %d: locked path must survive", freed, c.size)
	}
	c.unlock(node)
	if c.protected != 0 {
		t.Fatalf("protected %d after unlock", c.protected)
	}
	if freed := c.evict(1); freed == 0 {
		t.Fatal("nothing evicted after unlock")
	}
}

func TestRadixLRU(t *testing.T) {
	t.Parallel()
	c := newRadixCache(false)
	c.insert(ids(1, 1, 1))
	c.insert(ids(2, 2, 2))
	c.insert(ids(3, 3, 3))
	c.match(ids(1, 1, 1)) // touch the oldest
	c.evict(3)
	if n, _ := c.match(ids(2, 2, 2)); n != 0 {
		t.Fatal("least recently used entry survived")
	}
	if n, _ := c.match(ids(1, 1, 1)); n != 3 {
		t.Fatal("recently used entry evicted")
	}
}

func TestRadixDisabled(t *testing.T) {
	t.Parallel()
	c := newRadixCache(true)
	if c.insert(ids(1, 2, 3)) != 0 || c.size != 0 {
		t.Fatal("disabled cache stored tokens")
	}
	if n, _ := c.match(ids(1, 2, 3)); n != 0 {
		t.Fatal("disabled cache matched")
	}
}
