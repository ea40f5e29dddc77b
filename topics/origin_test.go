package topics

import (
	"slices"
	"testing"
)

func TestOrigins(t *testing.T) {
	t.Parallel()
	declared := packageConsts(t, "Origin")
	if len(declared) != len(Origins()) {
		t.Fatalf("Origins() = %v, the package declares %v", Origins(), declared)
	}
	for name, v := range declared {
		if !slices.Contains(Origins(), v) {
			t.Errorf("Origins() leaves out %s (%q)", name, v)
		}
		if !KnownOrigin(v) {
			t.Errorf("KnownOrigin(%q) is false", v)
		}
	}
	for _, o := range []string{OriginResult, OriginRecord, OriginDataset} {
		if !Kept(o) {
			t.Errorf("Kept(%q) is false", o)
		}
	}
	for _, o := range []string{"", OriginGenerated, "bogus"} {
		if Kept(o) {
			t.Errorf("Kept(%q) is true", o)
		}
	}
	if KnownOrigin("bogus") || !KnownOrigin("") {
		t.Error("KnownOrigin: bogus known, or empty unknown")
	}
	if OriginOf("") != OriginGenerated || OriginOf(OriginRecord) != OriginRecord {
		t.Errorf("OriginOf: %q, %q", OriginOf(""), OriginOf(OriginRecord))
	}
	o := Origins()
	o[0] = "changed"
	if Origins()[0] != OriginGenerated {
		t.Error("a caller's change to Origins() reached the next call")
	}
}

// A conversation to generate is accounted for by its id, whatever its turn; a kept row by id and turn, so the
// rows one conversation brings are accounted for each.
func TestAccountKey(t *testing.T) {
	t.Parallel()
	if k := AccountKey("c", 3, ""); k != "c" {
		t.Errorf("generated: %q", k)
	}
	if k := AccountKey("c", 3, OriginGenerated); k != "c" {
		t.Errorf("generated: %q", k)
	}
	a, b := AccountKey("c", 0, OriginDataset), AccountKey("c", 1, OriginDataset)
	if a == b || a == "c" || b == "c" {
		t.Errorf("kept rows share a key: %q %q", a, b)
	}
	if AccountKey("c", 1, OriginResult) != AccountKey("c", 1, OriginRecord) {
		t.Error("the key of a kept row depends on which kind it is")
	}
}
