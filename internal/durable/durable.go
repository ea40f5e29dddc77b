// Package durable owns the two file-system steps that make a write survive a crash: replacing a file through
// a temporary that is fsynced and renamed into place, and fsyncing a directory so that a rename in it is
// durable. The sink (manifests, indexes, counts) and the capture stage (feature indexes) both write through it.
// FileSHA256 is the checksum their manifests record of a file written, and check it against.
package durable

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SyncDir fsyncs a directory, making the renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// ErrRenamedNotSynced is wrapped by a WriteFile error that came after the rename: the new content may or may
// not survive a crash, and the file is not the old one either.
var ErrRenamedNotSynced = errors.New("renamed into place, but the directory fsync failed")

// WriteFile replaces path with data: it writes tmp (a name in path's directory), fsyncs it, renames it to path
// and fsyncs the directory. On an error before the rename the temporary is removed and path is untouched.
func WriteFile(path, tmp string, data []byte) error {
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%w: %v", ErrRenamedNotSynced, err)
	}
	return nil
}

// FileSHA256 returns the hex SHA-256 and size of a file.
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
