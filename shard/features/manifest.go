package features

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/draftflow/draftflow/internal/durable"
)

// ManifestName is the file, in a run directory, that lists the run's feature files. The sink owns the run's
// manifest.json; the capture stage owns this one (the sink rewrites its manifest after every flush, so a
// second writer there would race it).
const ManifestName = "features.json"

// Manifest lists the feature files of one run directory.
type Manifest struct {
	// Version is 1.
	Version int `json:"version"`
	// Header is every file's header (hidden size, layers, codec).
	Header Header `json:"header"`
	// Files lists one entry per shard that has its feature file, sorted by Shard.
	Files []FileEntry `json:"files"`
}

// FileEntry describes one complete feature file.
type FileEntry struct {
	// Shard is the shard's file name, File its feature file's (both in the run directory).
	Shard string `json:"shard"`
	File  string `json:"file"`
	// Rows counts the rows with features, Missing the shard's rows without (Index.Missing), Tokens the tokens
	// of the rows with features.
	Rows    int   `json:"rows"`
	Missing int   `json:"missing"`
	Tokens  int64 `json:"tokens"`
	// Bytes is the file's size, SHA256 its hex checksum.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Entry describes the complete feature file at path, the feature file of shard (a file name).
func Entry(path, shard string) (FileEntry, Header, error) {
	r, err := Open(path)
	if err != nil {
		return FileEntry{}, Header{}, err
	}
	e := FileEntry{Shard: shard, File: filepath.Base(path), Rows: len(r.Index.Rows), Missing: len(r.Index.Missing)}
	for _, x := range r.Index.Rows {
		e.Tokens += int64(x.Tokens)
	}
	h := r.Index.Header
	r.Close()
	e.SHA256, e.Bytes, err = durable.FileSHA256(path)
	return e, h, err
}

// ReadManifest reads a run directory's feature manifest; a directory without one gives nil and no error.
func ReadManifest(runDir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(runDir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(runDir, ManifestName), err)
	}
	if m.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, this build reads 1", filepath.Join(runDir, ManifestName), m.Version)
	}
	return &m, nil
}

// ManifestWriter updates the feature manifests of run directories; its updates are serialised, so Add is safe
// for concurrent use. One ManifestWriter per process writes a directory's manifests (the capture stage's
// consumer group has one member working on the one partition of its topic). The zero value is ready to use.
type ManifestWriter struct {
	mu sync.Mutex
}

// Add puts e (with header h) into runDir's feature manifest, replacing an entry of the same shard, and writes
// it atomically (a temporary file, fsync, rename, directory fsync).
func (w *ManifestWriter) Add(runDir string, h Header, e FileEntry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, err := ReadManifest(runDir)
	if err != nil {
		return err
	}
	if m == nil {
		m = &Manifest{Version: 1}
	}
	m.Header = h
	i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Shard >= e.Shard })
	if i < len(m.Files) && m.Files[i].Shard == e.Shard {
		m.Files[i] = e
	} else {
		m.Files = slices.Insert(m.Files, i, e)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(runDir, ManifestName)
	if err := durable.WriteFile(path, path+".tmp", b); err != nil {
		return fmt.Errorf("features: write %s: %w", path, err)
	}
	return nil
}
