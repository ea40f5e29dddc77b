package kafka

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go/compress"
)

// zstdCodec replaces kafka-go's zstd codec for every record batch this process writes or reads. kafka-go's own
// codec streams through pooled encoders with zstd's default 8 MiB window: each holds a 16 MiB history buffer,
// one per partition compressing at the same moment, and a garbage collection empties the pool, so a busy
// producer allocated them again and again (measured in `make scale`: 64 MiB of generate's live heap and most of
// ingest's peak were these buffers; the decoders of 8 MiB-window frames cost the sink another 16 MiB).
//
// This codec compresses a whole batch at once (EncodeAll) with a 1 MiB window on encoders shared by the
// process (one per core), and decompresses with shared low-memory decoders. The frames are ordinary zstd at the
// same level (3) that any Kafka client reads; only matches more than 1 MiB apart are given up, which records
// keyed by conversation rarely have.
type zstdCodec struct{}

// zstdWindow is the encoders' window; see zstdCodec.
const zstdWindow = 1 << 20

// zstdMaxDecoded bounds what one compressed batch may expand to: a corrupt or hostile batch fails instead of
// exhausting memory. A batch is at most Config.MaxMessageBytes compressed; 1 GiB leaves room for any real one.
const zstdMaxDecoded = 1 << 30

var (
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(zstdWindow),
			zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // the options are constants
		}
		return e
	})
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderLowmem(true), zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(zstdMaxDecoded))
		if err != nil {
			panic(err)
		}
		return d
	})
	// installZstd puts zstdCodec in kafka-go's codec table, which its writers and readers look codecs up in
	// (kafka-go has no per-client codec option): the one place a codec is registered. NewClient calls it.
	installZstd = sync.OnceFunc(func() { compress.Codecs[compress.Zstd] = zstdCodec{} })
)

func (zstdCodec) Code() int8   { return int8(compress.Zstd) }
func (zstdCodec) Name() string { return "zstd" }

// NewWriter buffers a batch and compresses it when kafka-go closes the writer.
func (zstdCodec) NewWriter(w io.Writer) io.WriteCloser {
	return &zstdWriter{dst: w, buf: new(bytes.Buffer)}
}

// NewReader decompresses a whole compressed batch on the first Read.
func (zstdCodec) NewReader(r io.Reader) io.ReadCloser { return &zstdReader{src: r} }

type zstdWriter struct {
	dst io.Writer
	buf *bytes.Buffer // nil once closed
}

func (w *zstdWriter) Write(p []byte) (int, error) {
	if w.buf == nil {
		return 0, io.ErrClosedPipe
	}
	return w.buf.Write(p)
}

func (w *zstdWriter) Close() error {
	if w.buf == nil {
		return nil
	}
	src := w.buf.Bytes()
	w.buf = nil
	_, err := w.dst.Write(zstdEnc().EncodeAll(src, make([]byte, 0, len(src)/2+64)))
	return err
}

type zstdReader struct {
	src  io.Reader
	out  *bytes.Reader
	err  error
	done bool
}

func (r *zstdReader) decode() {
	r.done = true
	in, err := io.ReadAll(r.src)
	if err != nil {
		r.err = err
		return
	}
	out, err := zstdDec().DecodeAll(in, nil)
	if err != nil {
		r.err = fmt.Errorf("kafka: zstd batch of %d bytes: %w", len(in), err)
		return
	}
	r.out = bytes.NewReader(out)
}

func (r *zstdReader) Read(p []byte) (int, error) {
	if !r.done {
		r.decode()
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.out.Read(p)
}

func (r *zstdReader) Close() error {
	r.out, r.src = nil, nil
	if r.err == nil {
		r.err = io.ErrClosedPipe
	}
	r.done = true
	return nil
}
