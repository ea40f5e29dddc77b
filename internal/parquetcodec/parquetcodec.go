// Package parquetcodec owns the process's Parquet codec table (arrow's compress registry), which is global to
// the process: Register installs draftflow's zstd codec (one encoder per level instead of one per page) and
// wraps every codec so that a page that does not decompress fails the read with an error instead of a panic.
// The sink (writing shards) and ingest (reading Parquet datasets) both call Register; nothing else touches
// the table.
package parquetcodec

import (
	"io"
	"sync"

	"github.com/apache/arrow/go/v17/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// zstdCodec is arrow's Parquet zstd codec with one difference: arrow v17's EncodeLevel builds a new
// zstd.Encoder (megabytes of tables) for every page it compresses, which was half the sink's CPU time. This
// codec keeps one encoder per level; EncodeAll is safe for concurrent use. Its output is ordinary zstd, so the
// files are unchanged for every reader.
type zstdCodec struct{}

var (
	zstdEncMu sync.Mutex
	zstdEncs  = map[zstd.EncoderLevel]*zstd.Encoder{}
	zstdDec   = sync.OnceValue(func() *zstd.Decoder { d, _ := zstd.NewReader(nil); return d })
)

func zstdEncoder(level int) *zstd.Encoder {
	l := zstd.SpeedDefault
	if level != compress.DefaultCompressionLevel {
		l = zstd.EncoderLevelFromZstd(level)
	}
	zstdEncMu.Lock()
	defer zstdEncMu.Unlock()
	e := zstdEncs[l]
	if e == nil {
		e, _ = zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1))
		zstdEncs[l] = e
	}
	return e
}

func (zstdCodec) Encode(dst, src []byte) []byte {
	return zstdEncoder(compress.DefaultCompressionLevel).EncodeAll(src, dst[:0])
}

func (zstdCodec) EncodeLevel(dst, src []byte, level int) []byte {
	return zstdEncoder(level).EncodeAll(src, dst[:0])
}

func (zstdCodec) Decode(dst, src []byte) []byte {
	out, err := zstdDec().DecodeAll(src, dst[:0])
	if err != nil {
		// The codec interface has no error result. arrow's own codec panics here, in goroutines of arrow's
		// readers where a panic kills the process; an empty page instead makes arrow report a size mismatch.
		return nil
	}
	return out
}

func (zstdCodec) NewReader(r io.Reader) io.ReadCloser {
	d, _ := zstd.NewReader(r)
	return d.IOReadCloser()
}

func (zstdCodec) NewWriter(w io.Writer) io.WriteCloser {
	e, _ := zstd.NewWriter(w)
	return e
}

func (zstdCodec) NewWriterLevel(w io.Writer, level int) (io.WriteCloser, error) {
	l := zstd.SpeedDefault
	if level != compress.DefaultCompressionLevel {
		l = zstd.EncoderLevelFromZstd(level)
	}
	return zstd.NewWriter(w, zstd.WithEncoderLevel(l))
}

// CompressBound is ZSTD_COMPRESSBOUND from zstd.h.
func (zstdCodec) CompressBound(n int64) int64 {
	extra := ((128 << 10) - n) >> 11
	if n >= (128 << 10) {
		extra = 0
	}
	return n + (n >> 8) + extra
}

// Register installs zstdCodec for Parquet zstd and wraps every registered codec in safeCodec, once per
// process. Call it before reading or writing Parquet.
var Register = sync.OnceFunc(func() {
	compress.RegisterCodec(compress.Codecs.Zstd, zstdCodec{})
	for _, c := range []compress.Compression{compress.Codecs.Snappy, compress.Codecs.Gzip, compress.Codecs.Brotli,
		compress.Codecs.Lz4, compress.Codecs.Zstd} {
		if inner, err := compress.GetCodec(c); err == nil {
			compress.RegisterCodec(c, safeCodec{inner})
		}
	}
})

// safeCodec is a Parquet codec whose Decode returns nil instead of panicking: arrow's codecs panic on corrupt
// data (their Decode has no error result), inside goroutines arrow starts where no recover of ours reaches. A
// failed Decode returns nothing, and arrow reports the page's size mismatch as an error.
type safeCodec struct{ compress.Codec }

// Decode is the wrapped codec's Decode, or nil where it panics.
func (c safeCodec) Decode(dst, src []byte) (out []byte) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	return c.Codec.Decode(dst, src)
}
