package idset

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestSetAcrossWriteOuts(t *testing.T) {
	t.Parallel()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.limit = 7 // write out every few ids
	long := strings.Repeat("x", 40000)
	ids := []string{"", "a", long}
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("id-%03d", i))
	}
	for i, id := range ids {
		if _, ok, err := s.Get(id); ok || err != nil {
			t.Fatalf("%q found before Put (%v)", id, err)
		}
		if err := s.Put(id, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put("id-005", []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		v, ok, err := s.Get(id)
		want := string([]byte{byte(i)})
		if id == "id-005" {
			want = "replaced"
		}
		if !ok || err != nil || string(v) != want {
			t.Fatalf("Get(%.10q) = %q, %v, %v; want %q", id, v, ok, err, want)
		}
	}
	n := 0
	prev := ""
	err = s.ForEach(func(id string, v []byte) error {
		if n > 0 && !strings.HasPrefix(id, "sha256:") && id <= prev {
			t.Fatalf("ForEach out of order: %q after %q", id, prev)
		}
		prev = id
		n++
		return nil
	})
	if err != nil || n != len(ids) {
		t.Fatalf("ForEach saw %d ids (%v), want %d", n, err, len(ids))
	}
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s behind", dir)
	}
}
