package parquetcodec

import (
	"bytes"
	"testing"

	"github.com/apache/arrow/go/v17/parquet/compress"
)

// After Register, Parquet zstd is draftflow's codec (round trip, ordinary zstd) and every codec survives a
// corrupt page: Decode returns nil, where arrow's own panics.
func TestRegister(t *testing.T) {
	Register()
	Register() // idempotent: no double wrapping
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := c.(safeCodec)
	if !ok {
		t.Fatalf("zstd codec is %T, want safeCodec", c)
	}
	if _, ok := sc.Codec.(zstdCodec); !ok {
		t.Fatalf("wrapped zstd codec is %T, want zstdCodec", sc.Codec)
	}
	src := bytes.Repeat([]byte("draftflow shard page "), 500)
	enc := c.Encode(nil, src)
	if got := c.Decode(make([]byte, len(src)), enc); !bytes.Equal(got, src) {
		t.Fatal("zstd round trip changed the page")
	}
	for _, k := range []compress.Compression{compress.Codecs.Snappy, compress.Codecs.Gzip, compress.Codecs.Brotli,
		compress.Codecs.Lz4, compress.Codecs.Zstd} {
		c, err := compress.GetCodec(k)
		if err != nil {
			continue
		}
		if _, ok := c.(safeCodec); !ok {
			t.Errorf("%v codec is %T, not wrapped", k, c)
		}
		if got := c.Decode(make([]byte, 64), []byte("not compressed data at all")); got != nil && len(got) == 64 {
			t.Errorf("%v decoded garbage into a full page", k)
		}
	}
}
