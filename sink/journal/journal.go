package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/shard"
)

// Dir is the directory, directly in the output directory, of the journal: per partition of the consumed topic,
// the records absorbed since the partition's last flush. It holds no shard; readers of shards ignore it.
const Dir = "journal"

// ext ends the name of a journal segment.
const ext = ".wal"

// Kind is the kind of a journal record.
type Kind byte

// Journal record kinds.
const (
	kindHeader Kind = 1 // JSON header: the partition the segment belongs to
	Record     Kind = 2 // a consumed record absorbed as a row or a duplicate: offset, then its Kafka value
	Skip       Kind = 3 // an offset absorbed without a row (its dead letter was acknowledged)
	Emitted    Kind = 4 // the next turn of the row at offset was acknowledged by the broker
)

// header is a segment's first record.
type header struct {
	FormatVersion int    `json:"format_version"`
	Log           string `json:"log,omitempty"`
	Topic         string `json:"topic"`
	Partition     int    `json:"partition"`
}

// formatVersion is the version of the segment layout.
const formatVersion = 1

// frameLen is the fixed part of every record: uint32 payload length, uint32 CRC-32C of the payload.
const frameLen = 8

// maxRecord bounds a record's payload: larger lengths are a torn or damaged tail.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one record read back from a segment.
type Entry struct {
	Kind   Kind
	Offset int64
	// Value is the Kafka value of a Record (nil for the other kinds).
	Value []byte
}

// Journal keeps, per partition of the consumed topic, every record the sink absorbed since the partition's
// last flush, appended as it is absorbed (so a killed process loses none of it: the kernel holds what was
// written) and fsynced by the sink's timer (Sync, every sink Config.JournalSync: a machine crash loses at
// most that much). A flush makes the partition's segments obsolete and removes them (Retire). Records carry a
// CRC, and a reader takes the longest valid prefix of each segment: since a conversation's turns share a
// partition, a later turn is never in the journal without the turn it was built from. Its methods are safe
// for concurrent use.
type Journal struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	segs  map[Key]*segment
	dirty bool  // a segment was created since the directory was last synced
	bytes int64 // appended since the last sync
}

// segment is the open journal of one partition: the files it spans (normally one) and the file appended to.
type segment struct {
	files   []string
	f       *os.File
	dirty   bool
	pending []string // ids of rows that end their conversation, to report once synced
}

// Recovered is what a partition's segments held at start.
type Recovered struct {
	Key     Key
	Files   []string
	Entries []Entry        // absorbed offsets in order (Record, Skip)
	Emitted map[int64]bool // offsets whose next turn was acknowledged
	Last    *os.File       // the last file, truncated to its valid prefix, open for appending (Adopt)
	Torn    int64          // bytes cut from torn tails
	Size    int64          // bytes of valid records
	stale   []string       // files holding nothing past the recovery point
}

// Open reads every segment under dir/Dir. next gives each partition's recovery point (the checkpoint's next
// offset): records below it are already in shards. Files holding nothing past it, and torn segment starts, are
// removed; the rest are returned, their last file truncated to its valid prefix and open for appending.
func Open(dir string, next func(Key) int64, log *slog.Logger) (*Journal, []*Recovered, error) {
	j := &Journal{dir: filepath.Join(dir, Dir), log: log, segs: map[Key]*segment{}}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("sink: journal: %w", err)
	}
	byKey, removed, err := j.readSegments()
	if err != nil {
		return nil, nil, err
	}
	keys := slices.SortedFunc(maps.Keys(byKey), Key.compare)
	var out []*Recovered
	for _, k := range keys {
		rec, err := recoverKey(k, byKey[k], next(k))
		if err != nil {
			return nil, nil, err
		}
		removed += len(rec.stale)
		if rec.Last != nil {
			out = append(out, rec)
		}
	}
	if removed > 0 {
		if err := durable.SyncDir(j.dir); err != nil {
			return nil, nil, err
		}
	}
	return j, out, nil
}

// segFile is one segment file read at start.
type segFile struct {
	name  string
	first int64 // the first absorbed offset it holds, -1 if none
	ents  []Entry
	valid int64 // bytes of its valid prefix
	size  int64
}

// readSegments reads the segment files of the journal directory by partition, removing temporary files and
// segments whose header never reached the disk (they held nothing); removed counts the latter.
func (j *Journal) readSegments() (byKey map[Key][]*segFile, removed int, err error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, 0, fmt.Errorf("sink: journal: %w", err)
	}
	byKey = map[Key][]*segFile{}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ext) {
			if !e.IsDir() && shard.IsTemp(e.Name()) {
				os.Remove(filepath.Join(j.dir, e.Name()))
			}
			continue
		}
		path := filepath.Join(j.dir, e.Name())
		hdr, entries, valid, size, err := readSegment(path)
		if err != nil {
			return nil, 0, fmt.Errorf("sink: journal %s: %w", path, err)
		}
		if hdr == nil {
			if err := os.Remove(path); err != nil {
				return nil, 0, fmt.Errorf("sink: journal: %w", err)
			}
			removed++
			continue
		}
		k := Key{hdr.Log, hdr.Topic, hdr.Partition}
		sf := &segFile{name: path, ents: entries, valid: valid, size: size, first: -1}
		for _, en := range entries {
			if en.Kind != Emitted {
				sf.first = en.Offset
				break
			}
		}
		byKey[k] = append(byKey[k], sf)
	}
	return byKey, removed, nil
}

// recoverKey gathers what partition k's segment files hold past its recovery point next, removes the files
// that hold nothing past it, and opens the last of the others for appending (Recovered.Last nil: none).
func recoverKey(k Key, files []*segFile, next int64) (*Recovered, error) {
	sort.Slice(files, func(a, b int) bool { return files[a].first < files[b].first })
	rec := &Recovered{Key: k, Emitted: map[int64]bool{}}
	seen := next - 1
	var keep []*segFile
	for _, sf := range files {
		useful := false
		for _, en := range sf.ents {
			switch {
			case en.Kind == Emitted:
				rec.Emitted[en.Offset] = true
			case en.Offset > seen:
				// Absorbed offsets only grow; anything at or below what is already taken is stale.
				rec.Entries = append(rec.Entries, en)
				seen = en.Offset
				useful = true
			}
		}
		if useful {
			keep = append(keep, sf)
			rec.Size += sf.valid
			rec.Torn += sf.size - sf.valid
		} else {
			rec.stale = append(rec.stale, sf.name)
		}
	}
	for _, name := range rec.stale {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("sink: journal: %w", err)
		}
	}
	if len(keep) == 0 {
		return rec, nil
	}
	for _, sf := range keep {
		rec.Files = append(rec.Files, sf.name)
	}
	last := keep[len(keep)-1]
	f, err := os.OpenFile(last.name, os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sink: journal: %w", err)
	}
	if last.size != last.valid {
		// A torn tail (a machine crash mid-append): cut it, so what is appended next is readable.
		if err := f.Truncate(last.valid); err != nil {
			f.Close()
			return nil, fmt.Errorf("sink: journal: cut the torn tail of %s: %w", last.name, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sink: journal: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("sink: journal: %w", err)
	}
	rec.Last = f
	return rec, nil
}

// ReadSegment reads a segment's valid prefix (the longest run of records whose CRC holds, after a valid
// header): its partition, its entries, the length of the valid prefix and the file's size. ok is false when
// even the header is torn (the file holds nothing).
func ReadSegment(path string) (k Key, entries []Entry, valid, size int64, ok bool, err error) {
	hdr, entries, valid, size, err := readSegment(path)
	if err != nil || hdr == nil {
		return Key{}, nil, valid, size, false, err
	}
	return Key{hdr.Log, hdr.Topic, hdr.Partition}, entries, valid, size, true, nil
}

// readSegment reads a segment's valid prefix: its header (nil if even that is torn), its entries, the length of
// the valid prefix and the file's size.
func readSegment(path string) (*header, []Entry, int64, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	var hdr *header
	var entries []Entry
	pos := 0
	for {
		if len(b)-pos < frameLen {
			break
		}
		n := binary.LittleEndian.Uint32(b[pos:])
		sum := binary.LittleEndian.Uint32(b[pos+4:])
		if n == 0 || n > maxRecord || int64(len(b)-pos-frameLen) < int64(n) {
			break
		}
		payload := b[pos+frameLen : pos+frameLen+int(n)]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		kind := Kind(payload[0])
		if hdr == nil {
			if kind != kindHeader {
				break
			}
			var h header
			if err := json.Unmarshal(payload[1:], &h); err != nil {
				break
			}
			if h.FormatVersion != formatVersion {
				return nil, nil, 0, 0, fmt.Errorf("format version %d, this build reads %d", h.FormatVersion, formatVersion)
			}
			hdr = &h
			pos += frameLen + int(n)
			continue
		}
		off, k := binary.Varint(payload[1:])
		if k <= 0 || (kind != Record && kind != Skip && kind != Emitted) {
			break
		}
		en := Entry{Kind: kind, Offset: off}
		if kind == Record {
			en.Value = payload[1+k:]
		}
		entries = append(entries, en)
		pos += frameLen + int(n)
	}
	if hdr == nil {
		return nil, nil, 0, int64(len(b)), nil
	}
	return hdr, entries, int64(pos), int64(len(b)), nil
}

// frame encodes one record.
func frame(kind Kind, offset int64, value []byte) []byte {
	payload := make([]byte, 0, 1+binary.MaxVarintLen64+len(value))
	payload = append(payload, byte(kind))
	payload = binary.AppendVarint(payload, offset)
	payload = append(payload, value...)
	return framePayload(payload)
}

func framePayload(payload []byte) []byte {
	b := make([]byte, frameLen, frameLen+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(payload, castagnoli))
	return append(b, payload...)
}

// segmentName names a partition's segment after the first offset it holds.
func segmentName(k Key, first int64) string {
	log := k.Log
	if log == "" {
		log = "nolog"
	}
	return fmt.Sprintf("%s+%d+%012d+%s%s", k.Topic, k.Partition, first, log, ext)
}

// Adopt makes a recovered partition's files the open segment of its key, appended to from now on.
func (j *Journal) Adopt(r *Recovered) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.segs[r.Key] = &segment{files: r.Files, f: r.Last}
}

// Append writes one absorbed record of partition k (opening the partition's segment if it has none). id, when
// not empty, is reported by Sync once the record is on disk.
func (j *Journal) Append(k Key, kind Kind, offset int64, value []byte, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		path := filepath.Join(j.dir, segmentName(k, offset))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("sink: journal: %w", err)
		}
		hdr, _ := json.Marshal(header{FormatVersion: formatVersion, Log: k.Log, Topic: k.Topic, Partition: k.Partition}) // always encodes
		if _, err := f.Write(framePayload(append([]byte{byte(kindHeader)}, hdr...))); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("sink: journal: %w", err)
		}
		sg = &segment{files: []string{path}, f: f}
		j.segs[k] = sg
		j.dirty = true
	}
	b := frame(kind, offset, value)
	if _, err := sg.f.Write(b); err != nil {
		return fmt.Errorf("sink: journal %s: %w", sg.f.Name(), err)
	}
	j.bytes += int64(len(b))
	sg.dirty = true
	if id != "" {
		sg.pending = append(sg.pending, id)
	}
	return nil
}

// Emitted records that the next turn of the row at offset of partition k was acknowledged, so that replaying
// the journal does not send it again. Without an open segment (the row's flush already removed it) there is
// nothing to record.
func (j *Journal) Emitted(k Key, offset int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		return
	}
	b := frame(Emitted, offset, nil)
	if _, err := sg.f.Write(b); err != nil {
		// Only costs a duplicate next turn if the journal is replayed.
		j.log.Warn("journal: could not record a sent next turn", "file", sg.f.Name(), "err", err)
		return
	}
	sg.dirty = true
}

// Sync fsyncs every segment written since the last sync (and the directory, for new segments) and returns the
// ids those segments made durable, and the bytes appended since the previous sync.
func (j *Journal) Sync() ([]string, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ids []string
	for _, sg := range j.segs {
		if !sg.dirty {
			continue
		}
		if err := sg.f.Sync(); err != nil {
			return nil, 0, fmt.Errorf("sink: journal: fsync %s: %w", sg.f.Name(), err)
		}
		sg.dirty = false
		ids = append(ids, sg.pending...)
		sg.pending = nil
	}
	if j.dirty {
		if err := durable.SyncDir(j.dir); err != nil {
			return nil, 0, fmt.Errorf("sink: journal: %w", err)
		}
		j.dirty = false
	}
	n := j.bytes
	j.bytes = 0
	return ids, n, nil
}

// Retire removes partition k's segments: a flush committed everything they hold. A removal that fails is
// harmless (the next start finds the file's records below the recovery point and removes it), so it is only
// logged. The ids not yet reported by Sync are dropped: the flush reports them.
func (j *Journal) Retire(k Key) {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		return
	}
	delete(j.segs, k)
	sg.f.Close()
	j.Remove(sg.files)
}

// Remove deletes segment files whose records are all in shards.
func (j *Journal) Remove(files []string) {
	for _, name := range files {
		if err := os.Remove(name); err != nil {
			j.log.Warn("journal: could not remove a flushed segment; the next start does", "file", name, "err", err)
		}
	}
}

// Close closes the open segments, leaving them on disk.
func (j *Journal) Close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, sg := range j.segs {
		sg.f.Close()
	}
	j.segs = map[Key]*segment{}
}

// Pending counts the records (rows and duplicates) that the journal under dir, a sink output directory, holds
// past the recovery point (the checkpoint): absorbed by a sink that stopped without flushing them, and written
// into shards when the sink next starts. It reads without changing anything, and counts 0 where there is no
// journal.
func Pending(dir string) int64 {
	cp, err := ReadCheckpoint(dir)
	if err != nil {
		return 0
	}
	segs, _ := filepath.Glob(filepath.Join(dir, Dir, "*"+ext))
	last := map[Key]int64{}
	var n int64
	sort.Strings(segs)
	for _, seg := range segs {
		k, entries, _, _, ok, err := ReadSegment(seg)
		if err != nil || !ok {
			continue
		}
		seen, ok := last[k]
		if !ok {
			seen = cp.Next(k) - 1
		}
		for _, en := range entries {
			if en.Kind == Record && en.Offset > seen {
				n++
				seen = en.Offset
			}
		}
		last[k] = seen
	}
	return n
}
