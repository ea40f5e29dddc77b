package kafka

import (
	"slices"
	"testing"
)

func TestDoneMetadataRoundTrip(t *testing.T) {
	for _, c := range []struct {
		committed int64
		done      []int64
	}{{0, nil}, {0, []int64{1}}, {100, []int64{101, 102, 150, 1_000_000}}, {-1, []int64{0, 5}}} {
		meta := encodeDone(c.committed, c.done)
		got, err := decodeDone(c.committed, meta)
		if err != nil || !slices.Equal(got, c.done) {
			t.Errorf("%d %v: meta %q decoded %v, %v", c.committed, c.done, meta, got, err)
		}
	}
	// Far more finished offsets than fit: the metadata stays under the broker's limit, keeping a prefix.
	var many []int64
	for i := int64(1); i <= 20_000; i++ {
		many = append(many, 10+i*3)
	}
	meta := encodeDone(10, many)
	got, err := decodeDone(10, meta)
	if len(meta) > maxDoneMeta || err != nil || len(got) < 1000 || !slices.Equal(got, many[:len(got)]) {
		t.Fatalf("%d bytes, %d offsets kept, %v", len(meta), len(got), err)
	}
	// Other metadata (another client's, or none) names nothing; a damaged string of ours is an error.
	if got, err := decodeDone(5, "something else"); got != nil || err != nil {
		t.Fatal(got, err)
	}
	if _, err := decodeDone(5, doneMetaPrefix+"!!"); err == nil {
		t.Fatal("damaged metadata accepted")
	}
}

func FuzzDecodeDone(f *testing.F) {
	f.Add(int64(0), encodeDone(0, []int64{3, 9, 400}))
	f.Add(int64(7), doneMetaPrefix+"AAAA")
	f.Fuzz(func(t *testing.T, committed int64, meta string) {
		got, err := decodeDone(committed, meta)
		if err != nil {
			return
		}
		prev := committed
		for _, off := range got {
			if off <= prev {
				t.Fatalf("offsets not increasing above the commit: %v", got)
			}
			prev = off
		}
		if again, err := decodeDone(committed, encodeDone(committed, got)); err != nil || len(got) > 0 && !slices.Equal(again, got) {
			t.Fatalf("re-encoding %v gave %v, %v", got, again, err)
		}
	})
}
