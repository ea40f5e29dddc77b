package sink

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

// registerZstd installs zstdCodec for Parquet zstd in this process (once).
var registerZstd = sync.OnceFunc(func() { compress.RegisterCodec(compress.Codecs.Zstd, zstdCodec{}) })
