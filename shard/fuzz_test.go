package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

func FuzzParseShardName(f *testing.F) {
	f.Add("generated+3+000000001200-000000001399.parquet")
	f.Add("ns.generated+0+000000000000-000000000000.parquet")
	f.Add(".tmp-generated+0+1-2.parquet")
	f.Add("generated+1+5-4.parquet")
	f.Fuzz(func(t *testing.T, name string) {
		si, ok := ParseName(name)
		if !ok {
			return
		}
		if si.LastOffset < si.FirstOffset || si.Partition < 0 || IsTemp(name) {
			t.Fatalf("accepted %q as %+v", name, si)
		}
		// Canonical names round-trip.
		again, ok := ParseName(si.Name())
		if !ok || again != si {
			t.Fatalf("%+v does not round-trip through %q", si, si.Name())
		}
	})
}

// FuzzShardRoundTrip writes rows derived from the input as a shard and reads them back token-exact.
func FuzzShardRoundTrip(f *testing.F) {
	f.Add([]byte("\x03\x02abcdefghijklmnopqrstuvwx"), uint8(2))
	f.Add([]byte("\x01\x01\xff\xff\xff\x7f\x00\x00\x00\x00"), uint8(1))
	f.Add(bytes.Repeat([]byte{7}, 300), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, groupRows uint8) {
		var rows []*WriteRow
		for len(data) >= 2 && len(rows) < 64 {
			np, no := int(data[0]%16)+1, int(data[1]%16)+1
			data = data[2:]
			next := func() uint32 {
				if len(data) < 4 {
					data = nil
					return 0
				}
				v := binary.LittleEndian.Uint32(data) & 0x7fffffff
				data = data[4:]
				return v
			}
			r := &WriteRow{ID: "r" + string(rune('a'+len(rows)%26)) + string(rune('0'+len(rows)/26)), Dataset: "d", FinishReason: "stop", Turn: int32(len(rows) % 3),
				Origin: topics.Origins()[(np+no)%len(topics.Origins())]}
			for i := 0; i < np; i++ {
				r.Prompt = append(r.Prompt, next())
			}
			for i := 0; i < no; i++ {
				r.Output = append(r.Output, next())
			}
			rows = append(rows, r)
		}
		if len(rows) == 0 {
			return
		}
		path := filepath.Join(t.TempDir(), "s.parquet")
		fh, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Write(fh, RunInfo{Fingerprint: "f"}, Origin{Topic: "generated"}, rows, WriteOptions{RowGroupRows: int(groupRows%8) + 1})
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Rows != int64(len(rows)) {
			t.Fatalf("wrote %d rows, want %d", st.Rows, len(rows))
		}
		sf, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer sf.Close()
		i := 0
		err = sf.Scan(context.Background(), nil, func(got *Row) error {
			want := rows[i]
			ids := append(slices.Clone(asInt32(want.Prompt)), asInt32(want.Output)...)
			if got.ID != want.ID || got.Turn != want.Turn || got.Origin != want.Origin || !slices.Equal(got.InputIDs, ids) || got.Validate(false) != nil ||
				int(got.PromptLen) != len(want.Prompt) {
				t.Fatalf("row %d: got %+v, want %+v", i, got, want)
			}
			i++
			return nil
		})
		if err != nil || i != len(rows) {
			t.Fatalf("read %d rows of %d: %v", i, len(rows), err)
		}
	})
}
