package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/draftflow/draftflow/internal/durable"
)

// TempPrefix marks files that are not yet committed; a name starting with it is never a shard a reader may
// use, and a writer that finds one on start may delete it.
const TempPrefix = ".tmp-"

// IsTemp reports whether a directory entry is an uncommitted temporary file.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// WriteFileAtomic replaces path with data (durable.WriteFile: temporary file, fsync, rename, directory
// fsync), its temporary named with TempPrefix.
func WriteFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	return durable.WriteFile(path, filepath.Join(dir, TempPrefix+base), data)
}

// WriteJSONAtomic writes v as indented JSON with WriteFileAtomic.
func WriteJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(b, '\n'))
}

// replaceFile replaces path with data by a temporary file and a rename, without fsyncs: for files a writer can
// rebuild from the shards (token counts), where a crash may leave the old or a torn version, never a wrong one
// that passes the reader's checks.
func replaceFile(path string, data []byte) error {
	dir, base := filepath.Split(path)
	tmp := filepath.Join(dir, TempPrefix+base)
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

// DirIDFile is the file, directly in an output directory, that holds the directory's identity: a random id
// the sink writes on its first start. The sink names its directory by it on the shards and shard-files topics,
// so that readers of those topics can tell a restarted sink of the same directory from a sink of another one.
const DirIDFile = "dir_id"

// ReadDirID returns the identity of the output directory dir (DirIDFile), or "" when it has none yet.
func ReadDirID(dir string) (string, error) {
	path := filepath.Join(dir, DirIDFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ConfigPrefix begins the name of a run's recorded configuration: ConfigFile.
const ConfigPrefix = "config-"

// ConfigFile is the name, in a run directory, of the effective configuration (a job file, secrets redacted) of a
// process that wrote shards of the run: config-<the first 12 hex digits of its SHA-256>.yaml. Each distinct
// configuration a run was written with has its own file, and a restart with the same one adds none.
func ConfigFile(config []byte) string {
	sum := sha256.Sum256(config)
	return ConfigPrefix + hex.EncodeToString(sum[:6]) + ".yaml"
}

// ConfigFiles returns the paths of the configurations recorded in run directory dir (ConfigFile), sorted.
func ConfigFiles(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, ConfigPrefix+"*.yaml"))
}
