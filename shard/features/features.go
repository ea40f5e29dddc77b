// Package features is draftflow's file format for the target model's EAGLE-3 features of each row: the
// hidden states an offline drafter trainer reads beside the token ids (docs/hidden-states.md says what
// SGLang returns, what the trainers want and why the format is this one).
//
// A feature file holds the rows of one shard. Each row is a bf16 array [tokens, width], width = the number of
// captured layers x the hidden size, layers in the order Header.Layers names them (draftflow writes the
// three EAGLE-3 auxiliary layers then the final-norm output: SpecForge's v1 aux_hidden_state is the first
// 3 x hidden columns and its hidden_state the last hidden columns; speculators' [tokens, 4, hidden] is the
// same bytes reshaped). A row is stored as one block: the bf16 values' high bytes (sign, exponent, top
// mantissa bit) then their low bytes, zstd-compressed (CodecZstd: the high bytes compress, the low bytes
// barely do), or the plain little-endian values (CodecRaw). Layout:
//
//	"DFFEAT01"                  magic
//	block ...                   one per row, in the order added
//	index                       JSON: Index (header, and per row id, tokens, offset, bytes, crc32 of the block)
//	uint64 little-endian        the index's length
//	"DFFEAT01"                  magic again
//
// A Writer writes PATH.tmp and renames it to PATH on Close after an fsync, so a file either holds every row
// it was given or does not exist. The Python reader is python/draftflow_data/features.py.
package features

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Magic opens and closes every feature file.
const Magic = "DFFEAT01"

// The block codecs.
const (
	// CodecZstd: byte planes (all high bytes, then all low bytes) compressed with zstd.
	CodecZstd = "zstd-planes"
	// CodecRaw: the bf16 values little-endian, uncompressed.
	CodecRaw = "raw"
)

// Bounds a file's index must keep (far above any model or row draftflow writes; they keep a damaged index
// from sizing allocations).
const (
	maxHidden = 1 << 20
	maxLayers = 64
	maxTokens = 1 << 22
	// maxBlockBytes bounds one decoded row (a 1M-token row at Kimi-K2's 4 x 7168 bf16 is 57 GB: rows are
	// far shorter).
	maxBlockBytes = 16 << 30
)

// Header describes every row of a file.
type Header struct {
	// Hidden is the target model's hidden size.
	Hidden int `json:"hidden"`
	// Layers names the captured layers in column order: "aux:N" is the input of decoder layer N (0-based;
	// transformers' hidden_states[N]), "final" the final norm's output (what lm_head reads).
	Layers []string `json:"layers"`
	// Codec is CodecZstd or CodecRaw.
	Codec string `json:"codec"`
}

// Width is the number of values per token.
func (h Header) Width() int { return h.Hidden * len(h.Layers) }

// RowInfo is one row's entry in the index.
type RowInfo struct {
	// ID is the row's id (the shard's id column).
	ID string `json:"id"`
	// Tokens is the row's length in tokens.
	Tokens int `json:"tokens"`
	// Offset and Bytes locate the row's block in the file.
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// CRC32 is the IEEE CRC-32 of the stored block.
	CRC32 uint32 `json:"crc32"`
	// Turn is the row's turn (the shard's turn column); Row its position in the shard (0-based), so that a
	// reader joins features and shard rows by position also where rows lack features (Index.Missing).
	Turn int `json:"turn"`
	Row  int `json:"row"`
}

// MissingRow is a row of the shard that has no features in the file, and why.
type MissingRow struct {
	// ID, Turn and Row name the row (Row: its position in the shard); Tokens is its length.
	ID     string `json:"id"`
	Turn   int    `json:"turn"`
	Row    int    `json:"row"`
	Tokens int    `json:"tokens"`
	// Class and Reason say why (the class and reason of its dead letter on the rejected topic).
	Class  string `json:"class"`
	Reason string `json:"reason"`
}

// Index is the file's index.
type Index struct {
	// Version is 1.
	Version int `json:"version"`
	// DType is "bfloat16".
	DType string `json:"dtype"`
	Header
	// Rows lists the rows in file order.
	Rows []RowInfo `json:"rows"`
	// Missing lists the rows of the shard whose features could not be captured (absent when none).
	Missing []MissingRow `json:"missing,omitempty"`
}

var (
	encOnce = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		return e
	})
	decOnce = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxBlockBytes))
		return d
	})
)

// Writer writes one feature file.
type Writer struct {
	path string
	f    *os.File
	idx  Index
	off  int64
	ids  map[rowID]bool
	buf  []byte
}

type rowID struct {
	id   string
	turn int
}

// Create starts a feature file at path (written as path.tmp until Close).
func Create(path string, h Header) (*Writer, error) {
	if h.Hidden <= 0 || len(h.Layers) == 0 {
		return nil, fmt.Errorf("features: %s: header needs a hidden size and at least one layer", path)
	}
	if h.Codec == "" {
		h.Codec = CodecZstd
	}
	if h.Codec != CodecZstd && h.Codec != CodecRaw {
		return nil, fmt.Errorf("features: %s: unknown codec %q", path, h.Codec)
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	if _, err := f.WriteString(Magic); err != nil {
		f.Close()
		return nil, fmt.Errorf("features: %w", err)
	}
	return &Writer{path: path, f: f, idx: Index{Version: 1, DType: "bfloat16", Header: h}, off: int64(len(Magic)),
		ids: map[rowID]bool{}}, nil
}

// Add appends a row of bf16 values (tokens x Width, row-major), as turn 0 at the next position.
func (w *Writer) Add(id string, tokens int, bf16 []uint16) error {
	return w.AddRow(RowInfo{ID: id, Tokens: tokens, Row: w.next()}, bf16)
}

// next is the next position in the shard: after the last row or missing row.
func (w *Writer) next() int {
	n := 0
	if k := len(w.idx.Rows); k > 0 {
		n = w.idx.Rows[k-1].Row + 1
	}
	if k := len(w.idx.Missing); k > 0 {
		n = max(n, w.idx.Missing[k-1].Row+1)
	}
	return n
}

// AddRow appends a row of bf16 values (r.Tokens x Width, row-major) named by r's ID, Turn and Row (its offset,
// size and CRC are filled in). An (id, turn) may appear once.
func (w *Writer) AddRow(r RowInfo, bf16 []uint16) error {
	id := r.ID
	if r.Tokens <= 0 || len(bf16) != r.Tokens*w.idx.Width() {
		return fmt.Errorf("features: row %s: %d values for %d tokens of width %d", id, len(bf16), r.Tokens, w.idx.Width())
	}
	if w.ids[rowID{id, r.Turn}] {
		return fmt.Errorf("features: row %s turn %d added twice", id, r.Turn)
	}
	w.ids[rowID{id, r.Turn}] = true
	block := w.encode(bf16)
	if _, err := w.f.Write(block); err != nil {
		return fmt.Errorf("features: row %s: %w", id, err)
	}
	r.Offset, r.Bytes, r.CRC32 = w.off, int64(len(block)), crc32.ChecksumIEEE(block)
	w.idx.Rows = append(w.idx.Rows, r)
	w.off += int64(len(block))
	return nil
}

// AddMissing records a row of the shard that has no features (Index.Missing).
func (w *Writer) AddMissing(m MissingRow) error {
	if w.ids[rowID{m.ID, m.Turn}] {
		return fmt.Errorf("features: row %s turn %d added twice", m.ID, m.Turn)
	}
	w.ids[rowID{m.ID, m.Turn}] = true
	w.idx.Missing = append(w.idx.Missing, m)
	return nil
}

// AddFloat32 appends a row given as float32 values, rounded to bf16 (round to nearest even).
func (w *Writer) AddFloat32(id string, tokens int, vals []float32) error {
	b := make([]uint16, len(vals))
	ToBF16(b, vals)
	return w.Add(id, tokens, b)
}

// AddLayers appends a row given as per-layer float32 parts of one position each (parts[j] holds tokens x
// widths[j] values): the row's columns are the parts side by side, so an aux capture [T, 3H] and a final
// capture [T, H] make one [T, 4H] row.
func (w *Writer) AddLayers(id string, tokens int, parts ...[]float32) error {
	return w.AddLayersRow(RowInfo{ID: id, Tokens: tokens, Row: w.next()}, parts...)
}

// AddLayersRow is AddLayers for a row named by r (see AddRow).
func (w *Writer) AddLayersRow(r RowInfo, parts ...[]float32) error {
	id, tokens := r.ID, r.Tokens
	if tokens <= 0 {
		return fmt.Errorf("features: row %s: %d tokens", id, tokens)
	}
	width := 0
	for _, p := range parts {
		if len(p)%tokens != 0 {
			return fmt.Errorf("features: row %s: a part of %d values for %d tokens", id, len(p), tokens)
		}
		width += len(p) / tokens
	}
	if width != w.idx.Width() {
		return fmt.Errorf("features: row %s: parts give width %d, the file's is %d", id, width, w.idx.Width())
	}
	b := make([]uint16, tokens*width)
	for t := 0; t < tokens; t++ {
		col := 0
		for _, p := range parts {
			pw := len(p) / tokens
			ToBF16(b[t*width+col:t*width+col+pw], p[t*pw:(t+1)*pw])
			col += pw
		}
	}
	return w.AddRow(r, b)
}

func (w *Writer) encode(v []uint16) []byte {
	n := len(v)
	if cap(w.buf) < 2*n {
		w.buf = make([]byte, 2*n)
	}
	raw := w.buf[:2*n]
	if w.idx.Codec == CodecRaw {
		for i, x := range v {
			binary.LittleEndian.PutUint16(raw[2*i:], x)
		}
		return raw
	}
	for i, x := range v {
		raw[i] = byte(x >> 8)
		raw[n+i] = byte(x)
	}
	return encOnce().EncodeAll(raw, nil)
}

// Rows is the number of rows added so far.
func (w *Writer) Rows() int { return len(w.idx.Rows) }

// Close writes the index, syncs and renames the file into place.
func (w *Writer) Close() error {
	idx, err := json.Marshal(w.idx)
	if err != nil {
		w.Abort()
		return fmt.Errorf("features: %w", err)
	}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], uint64(len(idx)))
	for _, b := range [][]byte{idx, tail[:], []byte(Magic)} {
		if _, err := w.f.Write(b); err != nil {
			w.Abort()
			return fmt.Errorf("features: %s: %w", w.path, err)
		}
	}
	if err := w.f.Sync(); err != nil {
		w.Abort()
		return fmt.Errorf("features: %s: %w", w.path, err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.path + ".tmp")
		return fmt.Errorf("features: %s: %w", w.path, err)
	}
	if err := os.Rename(w.path+".tmp", w.path); err != nil {
		return fmt.Errorf("features: %w", err)
	}
	return nil
}

// Abort removes the unfinished file.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.path + ".tmp")
}

// Reader reads a feature file.
type Reader struct {
	f    *os.File
	path string
	size int64
	// Index is the file's index.
	Index Index
	byID  map[string]int
}

// Open reads a feature file's index and checks its frame.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	r, err := open(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func open(f *os.File, path string) (*Reader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	size := st.Size()
	bad := func(why string) error { return fmt.Errorf("features: %s: not a feature file: %s", path, why) }
	if size < int64(2*len(Magic)+8) {
		return nil, bad("too short")
	}
	head := make([]byte, len(Magic))
	tail := make([]byte, 8+len(Magic))
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	if _, err := f.ReadAt(tail, size-int64(len(tail))); err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	if string(head) != Magic || string(tail[8:]) != Magic {
		return nil, bad("no magic at both ends (an unfinished write?)")
	}
	n := binary.LittleEndian.Uint64(tail[:8])
	idxEnd := size - int64(len(tail))
	if n > uint64(idxEnd-int64(len(Magic))) {
		return nil, bad("index length out of range")
	}
	idxBytes := make([]byte, n)
	if _, err := f.ReadAt(idxBytes, idxEnd-int64(n)); err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	r := &Reader{f: f, path: path, size: size, byID: map[string]int{}}
	dec := json.NewDecoder(bytes.NewReader(idxBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r.Index); err != nil {
		return nil, bad("index: " + err.Error())
	}
	ix := &r.Index
	if ix.Version != 1 || ix.DType != "bfloat16" || ix.Hidden <= 0 || ix.Hidden > maxHidden || len(ix.Layers) == 0 ||
		len(ix.Layers) > maxLayers || (ix.Codec != CodecZstd && ix.Codec != CodecRaw) {
		return nil, bad(fmt.Sprintf("unsupported index (version %d, dtype %q, hidden %d, %d layers, codec %q)",
			ix.Version, ix.DType, ix.Hidden, len(ix.Layers), ix.Codec))
	}
	dataEnd := idxEnd - int64(n)
	seen := make(map[rowID]bool, len(ix.Rows))
	for i, row := range ix.Rows {
		if row.Tokens <= 0 || row.Offset < int64(len(Magic)) || row.Bytes < 0 || row.Offset+row.Bytes > dataEnd ||
			row.Tokens > maxTokens {
			return nil, bad(fmt.Sprintf("row %d (%s): block out of range", i, row.ID))
		}
		k := rowID{row.ID, row.Turn}
		if seen[k] {
			return nil, bad(fmt.Sprintf("row %s turn %d listed twice", row.ID, row.Turn))
		}
		seen[k] = true
		if _, ok := r.byID[row.ID]; !ok {
			r.byID[row.ID] = i // the first turn of an id
		}
	}
	return r, nil
}

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// Find returns the index of the (first) row with id, or -1.
func (r *Reader) Find(id string) int {
	if i, ok := r.byID[id]; ok {
		return i
	}
	return -1
}

// Verify reads every row's block and checks its CRC against the index (without decoding it).
func (r *Reader) Verify() error {
	var block []byte
	for _, row := range r.Index.Rows {
		if cap(block) < int(row.Bytes) {
			block = make([]byte, row.Bytes)
		}
		block = block[:row.Bytes]
		if _, err := r.f.ReadAt(block, row.Offset); err != nil {
			return fmt.Errorf("features: %s: row %s: %w", r.path, row.ID, err)
		}
		if crc32.ChecksumIEEE(block) != row.CRC32 {
			return fmt.Errorf("features: %s: row %s: CRC mismatch", r.path, row.ID)
		}
	}
	return nil
}

// ReadBF16 returns row i's values as bf16 bits (tokens x width), checking its CRC and size.
func (r *Reader) ReadBF16(i int) ([]uint16, error) {
	row := r.Index.Rows[i]
	block := make([]byte, row.Bytes)
	if _, err := r.f.ReadAt(block, row.Offset); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("features: %s: row %s: %w", r.path, row.ID, err)
	}
	if crc32.ChecksumIEEE(block) != row.CRC32 {
		return nil, fmt.Errorf("features: %s: row %s: CRC mismatch", r.path, row.ID)
	}
	n := row.Tokens * r.Index.Width() // both bounded by open
	if r.Index.Codec == CodecRaw {
		if len(block) != 2*n {
			return nil, fmt.Errorf("features: %s: row %s: %d bytes for %d values", r.path, row.ID, len(block), n)
		}
		out := make([]uint16, n)
		for j := range out {
			out[j] = binary.LittleEndian.Uint16(block[2*j:])
		}
		return out, nil
	}
	// Decoded before anything of the index's size is allocated: a damaged index cannot ask for more memory
	// than the block holds (the decoder's own limit bounds what a block can expand to).
	raw, err := decOnce().DecodeAll(block, nil)
	if err != nil {
		return nil, fmt.Errorf("features: %s: row %s: %w", r.path, row.ID, err)
	}
	if len(raw) != 2*n {
		return nil, fmt.Errorf("features: %s: row %s: %d bytes for %d values", r.path, row.ID, len(raw), n)
	}
	out := make([]uint16, n)
	for j := range out {
		out[j] = uint16(raw[j])<<8 | uint16(raw[n+j])
	}
	return out, nil
}

// ReadFloat32 returns row i's values widened to float32.
func (r *Reader) ReadFloat32(i int) ([]float32, error) {
	b, err := r.ReadBF16(i)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b))
	for j, x := range b {
		out[j] = math.Float32frombits(uint32(x) << 16)
	}
	return out, nil
}

// ToBF16 rounds src to bf16 into dst (round to nearest, ties to even; NaN stays NaN), as torch's
// .to(torch.bfloat16) does.
func ToBF16(dst []uint16, src []float32) {
	for i, f := range src {
		u := math.Float32bits(f)
		if u&0x7fffffff > 0x7f800000 { // NaN: keep it a quiet NaN
			dst[i] = uint16(u>>16) | 0x40
			continue
		}
		u += 0x7fff + (u>>16)&1
		dst[i] = uint16(u >> 16)
	}
}
