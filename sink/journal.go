package sink

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/draftflow/draftflow/internal/durable"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// JournalDir is the directory, directly in Config.Dir, of the journal: per partition of the consumed topic, the
// records absorbed since the partition's last flush. It holds no shard; readers ignore it.
const JournalDir = "journal"

// journalExt ends the name of a journal segment.
const journalExt = ".wal"

// Journal record kinds.
const (
	jHeader  byte = 1 // JSON jHeaderData: the partition the segment belongs to
	jRecord  byte = 2 // a consumed record absorbed as a row or a duplicate: offset, then its Kafka value
	jSkip    byte = 3 // an offset absorbed without a row (its dead letter was acknowledged)
	jEmitted byte = 4 // the next turn of the row at offset was acknowledged by the broker
)

// jHeaderData is a segment's first record.
type jHeaderData struct {
	FormatVersion int    `json:"format_version"`
	Log           string `json:"log,omitempty"`
	Topic         string `json:"topic"`
	Partition     int    `json:"partition"`
}

// journalFormat is the version of the segment layout.
const journalFormat = 1

// jFrame is the fixed part of every record: uint32 payload length, uint32 CRC-32C of the payload.
const jFrame = 8

// maxJournalRecord bounds a record's payload: larger lengths are a torn or damaged tail.
const maxJournalRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// jEntry is one record read back from a segment.
type jEntry struct {
	kind   byte
	offset int64
	value  []byte
}

// journal keeps, per partition of the consumed topic, every record the sink absorbed since the partition's
// last flush, appended as it is absorbed (so a killed process loses none of it: the kernel holds what was
// written) and fsynced by the sink's timer every Config.JournalSync (so a machine crash loses at most that
// much). A flush makes the partition's segments obsolete and removes them. Records carry a CRC, and a reader
// takes the longest valid prefix of each segment: since a conversation's turns share a partition, a later
// turn is never in the journal without the turn it was built from.
type journal struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	segs  map[cpKey]*segment
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

// jRecovered is what a partition's segments held at start.
type jRecovered struct {
	key     cpKey
	files   []string
	entries []jEntry       // absorbed offsets in order (jRecord, jSkip)
	emitted map[int64]bool // offsets whose next turn was acknowledged
	last    *os.File       // the last file, truncated to its valid prefix, open for appending
	torn    int64          // bytes cut from torn tails
	size    int64          // bytes of valid records
	stale   []string       // files holding nothing past the recovery point
}

// openJournal reads every segment under dir/JournalDir. next gives each partition's recovery point: records
// below it are already in shards. Files holding nothing past it, and torn segment starts, are removed; the
// rest are returned, their last file truncated to its valid prefix and open for appending.
func openJournal(dir string, next func(cpKey) int64, log *slog.Logger) (*journal, []*jRecovered, error) {
	j := &journal{dir: filepath.Join(dir, JournalDir), log: log, segs: map[cpKey]*segment{}}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("sink: journal: %w", err)
	}
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: journal: %w", err)
	}
	type segFile struct {
		name  string
		hdr   jHeaderData
		first int64
		ents  []jEntry
		valid int64
		size  int64
	}
	byKey := map[cpKey][]*segFile{}
	removed := 0
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), journalExt) {
			if !e.IsDir() && isTemp(e.Name()) {
				os.Remove(filepath.Join(j.dir, e.Name()))
			}
			continue
		}
		path := filepath.Join(j.dir, e.Name())
		hdr, entries, valid, size, err := readSegment(path)
		if err != nil {
			return nil, nil, fmt.Errorf("sink: journal %s: %w", path, err)
		}
		if hdr == nil {
			// Created but its header never reached the disk: it held nothing.
			if err := os.Remove(path); err != nil {
				return nil, nil, fmt.Errorf("sink: journal: %w", err)
			}
			removed++
			continue
		}
		k := cpKey{hdr.Log, hdr.Topic, hdr.Partition}
		sf := &segFile{name: path, hdr: *hdr, ents: entries, valid: valid, size: size, first: -1}
		for _, en := range entries {
			if en.kind != jEmitted {
				sf.first = en.offset
				break
			}
		}
		byKey[k] = append(byKey[k], sf)
	}
	var out []*jRecovered
	keys := make([]cpKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		x, y := keys[a], keys[b]
		if x.topic != y.topic {
			return x.topic < y.topic
		}
		if x.log != y.log {
			return x.log < y.log
		}
		return x.partition < y.partition
	})
	for _, k := range keys {
		files := byKey[k]
		sort.Slice(files, func(a, b int) bool { return files[a].first < files[b].first })
		rec := &jRecovered{key: k, emitted: map[int64]bool{}}
		n := next(k)
		seen := n - 1
		var keep []*segFile
		for _, sf := range files {
			useful := false
			for _, en := range sf.ents {
				switch {
				case en.kind == jEmitted:
					rec.emitted[en.offset] = true
				case en.offset > seen:
					// Absorbed offsets only grow; anything at or below what is already taken is stale.
					rec.entries = append(rec.entries, en)
					seen = en.offset
					useful = true
				}
			}
			if useful {
				keep = append(keep, sf)
				rec.size += sf.valid
				rec.torn += sf.size - sf.valid
			} else {
				rec.stale = append(rec.stale, sf.name)
			}
		}
		for _, name := range rec.stale {
			if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("sink: journal: %w", err)
			}
			removed++
		}
		if len(keep) == 0 {
			continue
		}
		for _, sf := range keep {
			rec.files = append(rec.files, sf.name)
		}
		last := keep[len(keep)-1]
		f, err := os.OpenFile(last.name, os.O_RDWR, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("sink: journal: %w", err)
		}
		if last.size != last.valid {
			// A torn tail (a machine crash mid-append): cut it, so what is appended next is readable.
			if err := f.Truncate(last.valid); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("sink: journal: cut the torn tail of %s: %w", last.name, err)
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("sink: journal: %w", err)
			}
		}
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("sink: journal: %w", err)
		}
		rec.last = f
		out = append(out, rec)
	}
	if removed > 0 {
		if err := durable.SyncDir(j.dir); err != nil {
			return nil, nil, err
		}
	}
	return j, out, nil
}

// readSegment reads a segment's valid prefix: its header (nil if even that is torn), its entries, the length of
// the valid prefix and the file's size.
func readSegment(path string) (*jHeaderData, []jEntry, int64, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	var hdr *jHeaderData
	var entries []jEntry
	pos := 0
	for {
		if len(b)-pos < jFrame {
			break
		}
		n := binary.LittleEndian.Uint32(b[pos:])
		sum := binary.LittleEndian.Uint32(b[pos+4:])
		if n == 0 || n > maxJournalRecord || int64(len(b)-pos-jFrame) < int64(n) {
			break
		}
		payload := b[pos+jFrame : pos+jFrame+int(n)]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		kind := payload[0]
		if hdr == nil {
			if kind != jHeader {
				break
			}
			var h jHeaderData
			if err := json.Unmarshal(payload[1:], &h); err != nil {
				break
			}
			if h.FormatVersion != journalFormat {
				return nil, nil, 0, 0, fmt.Errorf("format version %d, this build reads %d", h.FormatVersion, journalFormat)
			}
			hdr = &h
			pos += jFrame + int(n)
			continue
		}
		off, k := binary.Varint(payload[1:])
		if k <= 0 || (kind != jRecord && kind != jSkip && kind != jEmitted) {
			break
		}
		en := jEntry{kind: kind, offset: off}
		if kind == jRecord {
			en.value = payload[1+k:]
		}
		entries = append(entries, en)
		pos += jFrame + int(n)
	}
	if hdr == nil {
		return nil, nil, 0, int64(len(b)), nil
	}
	return hdr, entries, int64(pos), int64(len(b)), nil
}

// frame encodes one record.
func frame(kind byte, offset int64, value []byte) []byte {
	payload := make([]byte, 0, 1+binary.MaxVarintLen64+len(value))
	payload = append(payload, kind)
	payload = binary.AppendVarint(payload, offset)
	payload = append(payload, value...)
	return framePayload(payload)
}

func framePayload(payload []byte) []byte {
	b := make([]byte, jFrame, jFrame+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(payload, castagnoli))
	return append(b, payload...)
}

// segmentName names a partition's segment after the first offset it holds.
func segmentName(k cpKey, first int64) string {
	log := k.log
	if log == "" {
		log = "nolog"
	}
	return fmt.Sprintf("%s+%d+%012d+%s%s", k.topic, k.partition, first, log, journalExt)
}

// adopt makes a recovered partition's files the open segment of k, appended to from now on.
func (j *journal) adopt(r *jRecovered) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.segs[r.key] = &segment{files: r.files, f: r.last}
}

// append writes one absorbed record of partition k (opening the partition's segment if it has none). id, when
// not empty, is reported by sync once the record is on disk.
func (j *journal) append(k cpKey, kind byte, offset int64, value []byte, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		path := filepath.Join(j.dir, segmentName(k, offset))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("sink: journal: %w", err)
		}
		hdr, _ := json.Marshal(jHeaderData{FormatVersion: journalFormat, Log: k.log, Topic: k.topic, Partition: k.partition})
		if _, err := f.Write(framePayload(append([]byte{jHeader}, hdr...))); err != nil {
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

// emitted records that the next turn of the row at offset of partition k was acknowledged, so that replaying
// the journal does not send it again. Without an open segment (the row's flush already removed it) there is
// nothing to record.
func (j *journal) emitted(k cpKey, offset int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		return
	}
	b := frame(jEmitted, offset, nil)
	if _, err := sg.f.Write(b); err != nil {
		// Only costs a duplicate next turn if the journal is replayed.
		j.log.Warn("journal: could not record a sent next turn", "file", sg.f.Name(), "err", err)
		return
	}
	sg.dirty = true
}

// sync fsyncs every segment written since the last sync (and the directory, for new segments) and returns the
// ids those segments made durable, and the bytes appended since the previous sync.
func (j *journal) sync() ([]string, int64, error) {
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

// retire removes partition k's segments: a flush committed everything they hold. A removal that fails is
// harmless (the next start finds the file's records below the recovery point and removes it), so it is only
// logged. The ids not yet reported by sync are dropped: the flush reports them.
func (j *journal) retire(k cpKey) {
	j.mu.Lock()
	defer j.mu.Unlock()
	sg := j.segs[k]
	if sg == nil {
		return
	}
	delete(j.segs, k)
	sg.f.Close()
	j.remove(sg.files)
}

// remove deletes segment files whose records are all in shards.
func (j *journal) remove(files []string) {
	for _, name := range files {
		if err := os.Remove(name); err != nil {
			j.log.Warn("journal: could not remove a flushed segment; the next start does", "file", name, "err", err)
		}
	}
}

// close closes the open segments, leaving them on disk.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, sg := range j.segs {
		sg.f.Close()
	}
	j.segs = map[cpKey]*segment{}
}

// JournalPending counts the records (rows and duplicates) that the journal under dir, a sink output directory,
// holds past the recovery point: absorbed by a sink that stopped without flushing them, and written into
// shards when the sink next starts. It reads without changing anything, and counts 0 where there is no journal.
func JournalPending(dir string) int64 {
	st := &store{dir: dir, cp: map[cpKey]*cpPartition{}}
	if st.readCheckpoint() != nil {
		return 0
	}
	segs, _ := filepath.Glob(filepath.Join(dir, JournalDir, "*"+journalExt))
	last := map[cpKey]int64{}
	var n int64
	sort.Strings(segs)
	for _, seg := range segs {
		hdr, entries, _, _, err := readSegment(seg)
		if err != nil || hdr == nil {
			continue
		}
		k := cpKey{hdr.Log, hdr.Topic, hdr.Partition}
		seen, ok := last[k]
		if !ok {
			seen = st.nextKey(k) - 1
		}
		for _, en := range entries {
			if en.kind == jRecord && en.offset > seen {
				n++
				seen = en.offset
			}
		}
		last[k] = seen
	}
	return n
}
