package sim

import "container/heap"

// radixCache is a token-level radix tree standing in for SGLang's RadixCache
// (page size 1). It only does accounting: a node holds the token ids of its
// edge, and every token in the tree occupies one KV slot of the pool. Nodes
// locked by a running request are protected; the rest are evictable (LRU,
// leaves first) and count as free for admission, as in SGLang.
type radixCache struct {
	root      *radixNode
	size      int    // tokens held by the tree
	protected int    // tokens in nodes with lockRef > 0
	tick      uint64 // logical clock for LRU
	disabled  bool
}

type radixNode struct {
	parent     *radixNode
	key        []int32
	children   map[int32]*radixNode
	lockRef    int
	lastAccess uint64
}

func newRadixCache(disabled bool) *radixCache {
	return &radixCache{root: &radixNode{children: map[int32]*radixNode{}}, disabled: disabled}
}

// evictable is the number of tokens that can be evicted right now.
func (c *radixCache) evictable() int { return c.size - c.protected }

// reset drops every entry. Callers must hold no locks on nodes.
func (c *radixCache) reset() {
	c.root = &radixNode{children: map[int32]*radixNode{}}
	c.size, c.protected = 0, 0
}

// match returns how many leading tokens of key are cached and the node ending
// exactly there (splitting an edge if the match ends inside it). It touches
// the matched path for LRU.
func (c *radixCache) match(key []int32) (int, *radixNode) {
	if c.disabled {
		return 0, c.root
	}
	c.tick++
	node, n := c.root, 0
	for n < len(key) {
		child, ok := node.children[key[n]]
		if !ok {
			break
		}
		l := commonPrefix(child.key, key[n:])
		child.lastAccess = c.tick
		if l < len(child.key) {
			node = c.split(child, l)
			n += l
			break
		}
		node = child
		n += l
	}
	return n, node
}

// split cuts child's edge after l tokens and returns the new upper node.
func (c *radixCache) split(child *radixNode, l int) *radixNode {
	upper := &radixNode{
		parent:     child.parent,
		key:        child.key[:l:l],
		children:   map[int32]*radixNode{},
		lockRef:    child.lockRef,
		lastAccess: child.lastAccess,
	}
	child.parent.children[upper.key[0]] = upper
	child.key = child.key[l:]
	child.parent = upper
	upper.children[child.key[0]] = child
	return upper
}

// insert adds key to the tree and returns how many of its tokens were new
// (the rest were already cached and the caller's copies are freed).
func (c *radixCache) insert(key []int32) int {
	if c.disabled || len(key) == 0 {
		return 0
	}
	c.tick++
	node, n := c.root, 0
	for n < len(key) {
		child, ok := node.children[key[n]]
		if !ok {
			break
		}
		l := commonPrefix(child.key, key[n:])
		child.lastAccess = c.tick
		if l < len(child.key) {
			child = c.split(child, l)
		}
		node = child
		n += l
	}
	if n == len(key) {
		return 0
	}
	leaf := &radixNode{
		parent:     node,
		key:        append([]int32(nil), key[n:]...),
		children:   map[int32]*radixNode{},
		lastAccess: c.tick,
	}
	node.children[leaf.key[0]] = leaf
	added := len(key) - n
	c.size += added
	return added
}

// lock protects node and its ancestors from eviction.
func (c *radixCache) lock(node *radixNode) {
	for n := node; n != nil && n != c.root; n = n.parent {
		if n.lockRef == 0 {
			c.protected += len(n.key)
		}
		n.lockRef++
	}
}

// unlock reverses lock.
func (c *radixCache) unlock(node *radixNode) {
	for n := node; n != nil && n != c.root; n = n.parent {
		n.lockRef--
		if n.lockRef == 0 {
			c.protected -= len(n.key)
		}
	}
}

// evict frees at least want tokens from unlocked leaves in LRU order, or as
// many as it can, and returns how many it freed.
func (c *radixCache) evict(want int) int {
	if want <= 0 || c.evictable() == 0 {
		return 0
	}
	h := &nodeHeap{}
	var collect func(*radixNode)
	collect = func(n *radixNode) {
		if len(n.children) == 0 && n != c.root && n.lockRef == 0 {
			*h = append(*h, n)
		}
		for _, ch := range n.children {
			collect(ch)
		}
	}
	collect(c.root)
	heap.Init(h)
	freed := 0
	for freed < want && h.Len() > 0 {
		n := heap.Pop(h).(*radixNode)
		delete(n.parent.children, n.key[0])
		freed += len(n.key)
		c.size -= len(n.key)
		p := n.parent
		if p != c.root && len(p.children) == 0 && p.lockRef == 0 {
			heap.Push(h, p)
		}
	}
	return freed
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

type nodeHeap []*radixNode

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].lastAccess < h[j].lastAccess }
func (h nodeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)        { *h = append(*h, x.(*radixNode)) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}
