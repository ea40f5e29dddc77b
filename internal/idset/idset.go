// Package idset is a scratch map from ids to small values that lives in a temporary file, so that a stage
// which must remember every id of a run (ingest's duplicate check, `draftflow run`'s accounting) holds a
// bounded amount of memory however many ids there are.
//
// A Set keeps the ids put since its last write-out in memory, up to a bound (DefaultPending), and writes them
// out in one transaction to a bbolt database (go.etcd.io/bbolt: one file, a copy-on-write B+tree read through
// a memory map) in a directory of its own. The file is scratch: it is not fsynced and is removed by Close;
// nothing of a Set survives its process. The pages of the file that the operating system keeps cached count
// in the process's resident set as file-backed pages, which the kernel reclaims under pressure; the heap stays
// within the pending bound.
package idset

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// DefaultPending is how many ids a Set holds in memory before it writes them out. A write-out of ids spread
// over the key space (content hashes) touches about one B+tree page per id, and bbolt holds every touched page
// in memory until the transaction commits: the pending bound is thus also the bound of a write-out's memory
// (about 60 MiB of heap at 4,096 ids, reached once the set holds a few hundred thousand ids and flat after;
// 65,536 ids measured 250 MiB at a million ids, still growing).
const DefaultPending = 1 << 12

var bucket = []byte("ids")

// Set is a temporary map from ids to values. It is not safe for concurrent use.
type Set struct {
	dir     string
	db      *bolt.DB
	pending map[string][]byte
	limit   int
}

// New creates an empty Set in a new temporary directory under dir (os.TempDir() when dir is "").
func New(dir string) (*Set, error) {
	tmp, err := os.MkdirTemp(dir, "draftflow-ids-")
	if err != nil {
		return nil, fmt.Errorf("idset: %w", err)
	}
	// Scratch data: no fsync at all, and a freelist kept in memory rather than written at every commit.
	db, err := bolt.Open(filepath.Join(tmp, "ids.bolt"), 0o600, &bolt.Options{
		NoSync: true, NoGrowSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType,
	})
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("idset: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(bucket)
		return err
	})
	if err != nil {
		db.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("idset: %w", err)
	}
	return &Set{dir: tmp, db: db, pending: map[string][]byte{}, limit: DefaultPending}, nil
}

// key is the bbolt key of id: a 0 byte and the id (bbolt refuses empty keys), or, for an id too long for a
// bbolt key, a 1 byte and the id's SHA-256.
func key(id string) []byte {
	if len(id) < bolt.MaxKeySize {
		return append([]byte{0}, id...)
	}
	sum := sha256.Sum256([]byte(id))
	return append([]byte{1}, sum[:]...)
}

// Get returns the value stored for id and whether id is in the set.
func (s *Set) Get(id string) ([]byte, bool, error) {
	if v, ok := s.pending[id]; ok {
		return v, true, nil
	}
	var out []byte
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucket).Get(key(id)); v != nil {
			out, found = bytes.Clone(v), true
		}
		return nil
	})
	return out, found, err
}

// Put stores v (copied) for id, replacing any value it had.
func (s *Set) Put(id string, v []byte) error {
	if _, ok := s.pending[id]; !ok && len(s.pending) >= s.limit {
		if err := s.flush(); err != nil {
			return err
		}
	}
	s.pending[strings.Clone(id)] = bytes.Clone(v)
	return nil
}

// flush writes the pending ids out in one transaction, in key order.
func (s *Set) flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	ids := make([]string, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, id := range ids {
			k := key(id)
			v := s.pending[id]
			if v == nil {
				v = []byte{}
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idset: %w", err)
	}
	clear(s.pending)
	return nil
}

// ForEach calls fn for every id and its value, in byte order of the ids, until fn returns an error. fn must
// not change the set; the value is valid only during the call. An id too long for a bbolt key (over 32 KiB)
// comes back as "sha256:" and the hex digest of the id.
func (s *Set) ForEach(fn func(id string, v []byte) error) error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			if k[0] == 1 {
				return fn(fmt.Sprintf("sha256:%x", k[1:]), v)
			}
			return fn(string(k[1:]), v)
		})
	})
}

// Close removes the set's file and directory.
func (s *Set) Close() error {
	err := s.db.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}
