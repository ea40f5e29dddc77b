// Package answers is the generate stage's journal of answered generations: every generation a server answered
// is appended to a file under a directory before it is produced to Kafka, so that a process killed before the
// generation reached a durable place downstream (the sink's journal, a replicated broker) does not ask a server
// for it again when it starts again: the stage produces the journaled generation instead.
//
// A record is written (a write system call, which the kernel keeps when the process dies) as soon as the
// answer is decoded; Sync fsyncs what was written since the last call, so a machine crash loses at most what
// was answered since then. Records carry a CRC-32C, and a reader takes the longest valid prefix of each
// segment. A segment is removed once Prune finds that every generation it holds is in the sink's shards.
package answers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/draftflow/draftflow/internal/durable"
)

// ext ends the name of a segment file.
const ext = ".answers"

// frameLen is the fixed part of every record: uint32 payload length, uint32 CRC-32C of the payload.
const frameLen = 8

// maxRecord bounds a record's payload: larger lengths are a torn or damaged tail.
const maxRecord = 1 << 30

// DefaultSegmentBytes is how large a segment grows before the next answer starts a new one.
const DefaultSegmentBytes = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key names a generation: the run's fingerprint (topics.RunFingerprint), the prompt id and the turn.
type Key struct {
	Run  string
	ID   string
	Turn int
}

// segment is one file of the journal and the keys it holds.
type segment struct {
	path string
	f    *os.File // open for reading (and, for the current segment, appending)
	size int64
	keys []Key
	own  bool // made by this process: appended to (a segment read at Open never is)
}

// loc is where a key's value is.
type loc struct {
	seg *segment
	off int64 // of the value
	n   int
}

// Journal is a directory of answered generations. Its methods are safe for concurrent use.
type Journal struct {
	dir          string
	segmentBytes int64

	mu     sync.Mutex
	segs   []*segment // oldest first; the last is appended to
	index  map[Key]loc
	seq    int
	dirty  bool // written since the last Sync
	newSeg bool // a segment was created since the last Sync
}

// Open reads the journal under dir (creating dir) and returns it; what it held can be looked up. New answers
// go to a new segment.
func Open(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("answers: %w", err)
	}
	j := &Journal{dir: dir, segmentBytes: DefaultSegmentBytes, index: map[Key]loc{}}
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		return nil, fmt.Errorf("answers: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		var seq int
		if _, err := fmt.Sscanf(filepath.Base(name), "%012d"+ext, &seq); err == nil {
			j.seq = max(j.seq, seq)
		}
		sg, err := j.read(name)
		if err != nil {
			j.Close()
			return nil, err
		}
		j.segs = append(j.segs, sg)
	}
	return j, nil
}

// read opens a segment and indexes its valid prefix.
func (j *Journal) read(path string) (*segment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("answers: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("answers: %w", err)
	}
	sg := &segment{path: path, f: f, size: int64(len(b))}
	for pos := 0; len(b)-pos >= frameLen; {
		n := binary.LittleEndian.Uint32(b[pos:])
		sum := binary.LittleEndian.Uint32(b[pos+4:])
		if n == 0 || n > maxRecord || int64(len(b)-pos-frameLen) < int64(n) {
			break
		}
		payload := b[pos+frameLen : pos+frameLen+int(n)]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		k, klen, ok := decodeKey(payload)
		if !ok {
			break
		}
		sg.keys = append(sg.keys, k)
		j.index[k] = loc{seg: sg, off: int64(pos + frameLen + klen), n: int(n) - klen}
		pos += frameLen + int(n)
	}
	return sg, nil
}

// encodeKey is a key as the start of a record: three uvarint-length-prefixed strings and a uvarint turn.
func encodeKey(k Key) []byte {
	b := binary.AppendUvarint(nil, uint64(len(k.Run)))
	b = append(b, k.Run...)
	b = binary.AppendUvarint(b, uint64(len(k.ID)))
	b = append(b, k.ID...)
	return binary.AppendUvarint(b, uint64(k.Turn))
}

// decodeKey reads the key at the start of a record's payload and its length.
func decodeKey(p []byte) (Key, int, bool) {
	var k Key
	pos := 0
	str := func() (string, bool) {
		n, w := binary.Uvarint(p[pos:])
		if w <= 0 || n > uint64(len(p)-pos-w) {
			return "", false
		}
		s := string(p[pos+w : pos+w+int(n)])
		pos += w + int(n)
		return s, true
	}
	var ok bool
	if k.Run, ok = str(); !ok {
		return k, 0, false
	}
	if k.ID, ok = str(); !ok {
		return k, 0, false
	}
	turn, w := binary.Uvarint(p[pos:])
	if w <= 0 || turn > 1<<31 {
		return k, 0, false
	}
	k.Turn = int(turn)
	return k, pos + w, true
}

// Append journals the answered generation value under k. It returns once the record is written (not fsynced).
func (j *Journal) Append(k Key, value []byte) error {
	if k.Turn < 0 {
		return fmt.Errorf("answers: turn %d", k.Turn)
	}
	key := encodeKey(k)
	payload := make([]byte, 0, len(key)+len(value))
	payload = append(append(payload, key...), value...)
	rec := make([]byte, frameLen, frameLen+len(payload))
	binary.LittleEndian.PutUint32(rec, uint32(len(payload)))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(payload, castagnoli))
	rec = append(rec, payload...)

	j.mu.Lock()
	defer j.mu.Unlock()
	sg, err := j.current()
	if err != nil {
		return err
	}
	if _, err := sg.f.WriteAt(rec, sg.size); err != nil {
		return fmt.Errorf("answers: %w", err)
	}
	j.index[k] = loc{seg: sg, off: sg.size + frameLen + int64(len(key)), n: len(value)}
	sg.size += int64(len(rec))
	sg.keys = append(sg.keys, k)
	j.dirty = true
	return nil
}

// current returns the segment appended to, starting a new one when there is none yet in this process or the
// last is full. Called with j.mu held.
func (j *Journal) current() (*segment, error) {
	if n := len(j.segs); n > 0 && j.segs[n-1].own && j.segs[n-1].size < j.segmentBytes {
		return j.segs[n-1], nil
	}
	j.seq++
	path := filepath.Join(j.dir, fmt.Sprintf("%012d%s", j.seq, ext))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("answers: %w", err)
	}
	sg := &segment{path: path, f: f, own: true}
	j.segs = append(j.segs, sg)
	j.newSeg = true
	return sg, nil
}

// Lookup returns the value journaled under k.
func (j *Journal) Lookup(k Key) ([]byte, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock() // Prune may close the segment's file
	l, ok := j.index[k]
	if !ok {
		return nil, false, nil
	}
	b := make([]byte, l.n)
	if _, err := l.seg.f.ReadAt(b, l.off); err != nil {
		return nil, false, fmt.Errorf("answers: read %s: %w", l.seg.path, err)
	}
	return b, true, nil
}

// Len is how many generations the journal holds.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.index)
}

// Sync fsyncs what was written since the last call (and the directory, for new segments).
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.dirty && len(j.segs) > 0 {
		if err := j.segs[len(j.segs)-1].f.Sync(); err != nil {
			return fmt.Errorf("answers: fsync: %w", err)
		}
		j.dirty = false
	}
	if j.newSeg {
		if err := durable.SyncDir(j.dir); err != nil {
			return fmt.Errorf("answers: %w", err)
		}
		j.newSeg = false
	}
	return nil
}

// Prune removes every segment all of whose generations held reports as durable elsewhere (in the sink's shards);
// it returns how many it removed. The segment appended to is removed too when it is all held: the next answer
// starts a new one.
func (j *Journal) Prune(held func(Key) bool) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var keep []*segment
	var errs []error
	removed := 0
	for _, sg := range j.segs {
		all := true
		for _, k := range sg.keys {
			if l, ok := j.index[k]; ok && l.seg == sg && !held(k) {
				all = false
				break
			}
		}
		if !all {
			keep = append(keep, sg)
			continue
		}
		if sg == j.segs[len(j.segs)-1] && j.dirty {
			j.dirty = false
		}
		sg.f.Close()
		if err := os.Remove(sg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("answers: %w", err))
		}
		for _, k := range sg.keys {
			if l, ok := j.index[k]; ok && l.seg == sg {
				delete(j.index, k)
			}
		}
		removed++
	}
	j.segs = keep
	return removed, errors.Join(errs...)
}

// Close closes the journal's files, leaving them on disk.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var errs []error
	for _, sg := range j.segs {
		if err := sg.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	j.segs = nil
	j.index = map[Key]loc{}
	return errors.Join(errs...)
}
