package shard

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadDirID: no dir_id yet is no identity and no error; a written one is read without its newline; one
// that cannot be read is an error, not an empty identity.
func TestReadDirID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if id, err := ReadDirID(dir); id != "" || err != nil {
		t.Fatalf("without dir_id: %q %v", id, err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, DirIDFile), []byte("5b0c7d1e9a2f0011\n")); err != nil {
		t.Fatal(err)
	}
	if id, err := ReadDirID(dir); id != "5b0c7d1e9a2f0011" || err != nil {
		t.Fatalf("written: %q %v", id, err)
	}
	bad := t.TempDir()
	if err := os.Mkdir(filepath.Join(bad, DirIDFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := ReadDirID(bad); err == nil {
		t.Fatalf("an unreadable dir_id gave %q and no error", id)
	}
}
