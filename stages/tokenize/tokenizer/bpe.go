package tokenizer

import (
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"unicode/utf8"
)

// bpeModel is HF's BPE model (dropout unsupported). Words arrive in "model space": raw bytes when
// the pre-tokenizer ends with ByteLevel (byteLevel set; vocabulary keys decoded from the byte-level
// alphabet at load), the normalized text otherwise.
type bpeModel struct {
	vocab     map[string]uint32 // model-space token -> id
	merges    *pairMap          // left<<32|right -> rank<<32|merged id
	byteLevel bool
	// byteID[b] is the id of the single-byte token b in byte-level mode, or -1.
	byteID       [256]int32
	unkID        int32 // -1 when the model has no unk token
	fuseUnk      bool
	byteFallback bool
	fallbackID   [256]int32 // ids of <0xNN> tokens, -1 when absent
	prefix       string     // continuing_subword_prefix in model space ("" when none)
	suffix       string     // end_of_word_suffix in model space
	ignoreMerges bool
	cache        *wordCache
	vocabLen     int // entries in the tokenizer.json vocabulary
	// runeID[r] is the id of the one-rune token r (BMP only) in char mode, or -1.
	runeID []int32
	// extraVocab holds byte-level-mode tokens whose text is outside the byte-level alphabet: BPE
	// never produces them, but token_to_id finds them.
	extraVocab map[string]uint32
}

// encodeWord appends the ids of one pre-tokenized word.
func (m *bpeModel) encodeWord(st *scratch, w string, dst []uint32) []uint32 {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	if m.byteLevel && len(w) == 1 && m.byteID[w[0]] >= 0 {
		return append(dst, uint32(m.byteID[w[0]]))
	}
	if ids, ok := m.cache.get(w); ok {
		return append(dst, ids...)
	}
	syms := m.initialSymbols(w, st.syms[:0])
	syms = m.mergeAll(st, syms)
	st.syms = syms
	if len(w) < maxCachedWordLen {
		m.cache.put(w, syms)
	}
	return append(dst, syms...)
}

// unitText returns the text HF's BPE sees for one unit (the byte-level rune in byte-level mode),
// whose UTF-8 bytes byte fallback looks up.
func (m *bpeModel) unitText(u string) string {
	if m.byteLevel {
		return byteToStr[u[0]]
	}
	return u
}

// initialSymbols splits w into units (bytes in byte-level mode, runes otherwise) and maps them to
// ids with HF's rules for unknown units: byte fallback, then the (optionally fused) unk token.
func (m *bpeModel) initialSymbols(w string, syms []uint32) []uint32 {
	unkPending := false
	for i := 0; i < len(w); {
		n := 1
		if !m.byteLevel {
			_, n = utf8.DecodeRuneInString(w[i:])
		}
		if !m.byteLevel && m.prefix == "" && m.suffix == "" && m.runeID != nil {
			if r, _ := utf8.DecodeRuneInString(w[i:]); r < rune(len(m.runeID)) {
				if id := m.runeID[r]; id >= 0 {
					if unkPending {
						syms = append(syms, uint32(m.unkID))
						unkPending = false
					}
					syms = append(syms, uint32(id))
					i += n
					continue
				}
			}
		}
		if m.byteLevel && m.prefix == "" && m.suffix == "" {
			if id := m.byteID[w[i]]; id >= 0 {
				if unkPending {
					syms = append(syms, uint32(m.unkID))
					unkPending = false
				}
				syms = append(syms, uint32(id))
				i += n
				continue
			}
		}
		u := w[i : i+n]
		key := u
		if i > 0 && m.prefix != "" {
			key = m.prefix + key
		}
		if i+n == len(w) && m.suffix != "" {
			key += m.suffix
		}
		if id, ok := m.vocab[key]; ok {
			if unkPending {
				syms = append(syms, uint32(m.unkID))
				unkPending = false
			}
			syms = append(syms, id)
			i += n
			continue
		}
		i += n
		if m.byteFallback {
			text := m.unitText(u)
			ok := true
			for k := 0; k < len(text); k++ {
				if m.fallbackID[text[k]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				for k := 0; k < len(text); k++ {
					syms = append(syms, uint32(m.fallbackID[text[k]]))
				}
				continue
			}
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				syms = append(syms, uint32(m.unkID))
			}
			unkPending = true
		}
	}
	if unkPending {
		syms = append(syms, uint32(m.unkID))
	}
	return syms
}

const noMerge = ^uint32(0)

func (m *bpeModel) pair(a, b uint32) (rank, id uint32) {
	v, ok := m.merges.get(uint64(a)<<32 | uint64(b))
	if !ok {
		return noMerge, 0
	}
	return uint32(v >> 32), uint32(v)
}

// mergeAll applies merges lowest rank first, leftmost first among equal ranks (HF Word::merge_all).
func (m *bpeModel) mergeAll(st *scratch, syms []uint32) []uint32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > longWord {
		return m.mergeHeap(st, syms)
	}
	return m.mergeQuadratic(st, syms)
}

// mergeQuadratic is mergeAll for short words: rescan the pair ranks for the best merge each time.
func (m *bpeModel) mergeQuadratic(st *scratch, syms []uint32) []uint32 {
	ranks := st.ranks[:0]
	for i := 0; i+1 < len(syms); i++ {
		r, _ := m.pair(syms[i], syms[i+1])
		ranks = append(ranks, r)
	}
	for {
		best, bi := noMerge, -1
		for i, r := range ranks {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		_, id := m.pair(syms[bi], syms[bi+1])
		syms[bi] = id
		syms = append(syms[:bi+1], syms[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		if bi > 0 {
			ranks[bi-1], _ = m.pair(syms[bi-1], syms[bi])
		}
		if bi < len(ranks) {
			ranks[bi], _ = m.pair(syms[bi], syms[bi+1])
		}
	}
	st.ranks = ranks
	return syms
}

// longWord is the symbol count above which mergeAll switches from the quadratic scan to a heap.
const longWord = 64

// mergeCand is a candidate merge: key is rank<<32 | position, so one comparison orders by rank
// then leftmost position.
type mergeCand struct {
	key uint64
	id  uint32
}

// candHeap is a binary min-heap of merge candidates.
type candHeap []mergeCand

func (h candHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		small := l
		if r := l + 1; r < n && h[r].key < h[l].key {
			small = r
		}
		if h[small].key >= h[i].key {
			return
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}

func (h *candHeap) push(c mergeCand) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[i].key >= q[p].key {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candHeap) pop() mergeCand {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	q.down(0)
	*h = q
	return top
}

// mergeHeap is the O(n log n) merge for long words: a doubly linked list of symbols and a heap of
// candidate merges keyed by (rank, position), validated when popped (HF Word::merge_all).
func (m *bpeModel) mergeHeap(st *scratch, syms []uint32) []uint32 {
	n := len(syms)
	prev := slices.Grow(st.prev[:0], n)[:n]
	next := slices.Grow(st.next[:0], n)[:n]
	h := st.heap[:0]
	defer func() { st.prev, st.next, st.heap = prev, next, h }()
	for i := range syms {
		prev[i], next[i] = int32(i-1), int32(i+1)
		if i+1 < n {
			if r, id := m.pair(syms[i], syms[i+1]); r != noMerge {
				h = append(h, mergeCand{uint64(r)<<32 | uint64(i), id})
			}
		}
	}
	next[n-1] = -1
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	const dead = -2
	for len(h) > 0 {
		c := h.pop()
		p := int32(uint32(c.key))
		q := next[p]
		if q < 0 || prev[p] == dead {
			continue
		}
		if r, id := m.pair(syms[p], syms[q]); uint64(r) != c.key>>32 || id != c.id {
			continue
		}
		syms[p] = c.id
		next[p] = next[q]
		prev[q] = dead
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		if pp := prev[p]; pp >= 0 {
			if r, id := m.pair(syms[pp], syms[p]); r != noMerge {
				h.push(mergeCand{uint64(r)<<32 | uint64(pp), id})
			}
		}
		if nn := next[p]; nn >= 0 {
			if r, id := m.pair(syms[p], syms[nn]); r != noMerge {
				h.push(mergeCand{uint64(r)<<32 | uint64(p), id})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// maxCachedWordLen bounds the byte length of cached words (as HF's MAX_LENGTH).
const maxCachedWordLen = 256

// wordCache is a bounded, sharded, concurrency-safe map from word to ids. A full shard is reset,
// which keeps memory bounded without per-hit bookkeeping.
type wordCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const cacheShards = 32

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
	_  [40]byte // avoid false sharing between shard locks
}

func newWordCache(capacity int) *wordCache {
	if capacity <= 0 {
		return nil
	}
	c := &wordCache{seed: maphash.MakeSeed(), perShard: max(1, capacity/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	if c == nil {
		return nil, false
	}
	sh := c.shard(w)
	sh.mu.RLock()
	ids, ok := sh.m[w]
	sh.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	if c == nil {
		return
	}
	cp := append([]uint32(nil), ids...)
	sh := c.shard(w)
	sh.mu.Lock()
	if len(sh.m) >= c.perShard {
		clear(sh.m)
	}
	sh.m[string([]byte(w))] = cp
	sh.mu.Unlock()
}

// errUnsupported reports a tokenizer.json component this package does not implement.
func errUnsupported(kind, what string) error {
	return fmt.Errorf("tokenizer: unsupported %s %q", kind, what)
}
