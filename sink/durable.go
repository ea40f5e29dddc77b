package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/draftflow/draftflow/internal/durable"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// tmpPrefix marks files that are not yet committed; a name starting with it is never a shard a reader may use.
const tmpPrefix = ".tmp-"

// writeFileAtomic replaces path with data (durable.WriteFile), its temporary named with tmpPrefix.
func writeFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	return durable.WriteFile(path, filepath.Join(dir, tmpPrefix+base), data)
}

// replaceFile replaces path with data by a temporary file and a rename, without fsyncs: for files the sink can
// rebuild from the shards on start (token counts), where a crash may leave the old or a torn version, never a
// wrong one that passes the reader's checks.
func replaceFile(path string, data []byte) error {
	dir, base := filepath.Split(path)
	tmp := filepath.Join(dir, tmpPrefix+base)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// errRenamedNotSynced is wrapped by a writeFileAtomic error that came after the rename: the new content may
// already be what a restart reads, so the caller must not undo what that content points to.
var errRenamedNotSynced = durable.ErrRenamedNotSynced

// writeJSONAtomic writes v as indented JSON with writeFileAtomic.
func writeJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// countingHash counts and hashes what is written through it.
type countingHash struct {
	w io.Writer
	h hash.Hash
	n int64
}

func newCountingHash(w io.Writer) *countingHash { return &countingHash{w: w, h: sha256.New()} }

func (c *countingHash) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// isTemp reports whether a directory entry is an uncommitted temporary file.
func isTemp(name string) bool { return strings.HasPrefix(name, tmpPrefix) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
