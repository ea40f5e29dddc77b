package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/draftflow/draftflow/topics"
)

// DefaultMaxLineBytes is the longest JSONL line ReadFile accepts; longer lines are rejected with
// ReasonLineTooLong (their first bytes are the payload) and reading goes on with the next line.
const DefaultMaxLineBytes = 32 << 20

// RecordFunc receives each Prompt of a file, in file order (ParseRows): a conversation's, or each row of a line
// of token ids (one line of a multi-turn pre-tokenized record gives several, with the same src and raw).
// Exactly one of p and err is meaningful: err is a *LineError for a line that is neither a usable conversation
// nor a usable row of token ids. src locates the line (1-based line for JSONL, 1-based row for Parquet); raw is
// the line (for Parquet, the row as JSON) and is only valid during the call. Returning an error stops reading;
// ReadFile returns it.
type RecordFunc func(p topics.Prompt, err error, src topics.Source, raw []byte) error

// each calls fn with every Prompt of a line, or once with its error.
func each(fn RecordFunc, ps []topics.Prompt, perr error, src topics.Source, raw []byte) error {
	if perr != nil || len(ps) == 0 {
		return fn(topics.Prompt{}, perr, src, raw)
	}
	for _, p := range ps {
		if err := fn(p, nil, src, raw); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile streams the Prompts of one input file: JSONL or one JSON array of rows (optionally .gz or .zst
// compressed), or Parquet (by extension, or by its PAR1 magic). The dataset of every prompt is
// DatasetName(path). Line-level problems reach fn as errors; ReadFile itself fails only when the file cannot
// be read.
func ReadFile(path string, fn func(p topics.Prompt, err error, src topics.Source, raw []byte) error) error {
	return readFile(context.Background(), path, readOptions{}, fn)
}

// readOptions tune readFile; zero values are defaults.
type readOptions struct {
	dataset      string        // overrides DatasetName(path)
	maxLineBytes int           // default DefaultMaxLineBytes
	progress     func(n int64) // called with the number of file bytes consumed since the last call
	// unknownKeys, when set, is called with the keys of a row that are not read (RowKeys), sorted.
	unknownKeys func(dataset string, keys []string, src topics.Source)
}

func readFile(ctx context.Context, path string, opt readOptions, fn RecordFunc) error {
	if opt.dataset == "" {
		opt.dataset = DatasetName(path)
	}
	if opt.maxLineBytes <= 0 {
		opt.maxLineBytes = DefaultMaxLineBytes
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	defer f.Close()
	if isParquet(path, f) {
		return readParquet(ctx, path, f, opt, fn)
	}
	var r io.Reader = &countingReader{r: f, report: opt.progress}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".gz":
		gz, err := gzip.NewReader(r)
		if err != nil {
			return fileErr(path, 1, ReasonCorruptFile, "not a readable gzip file: %v", err)
		}
		defer gz.Close()
		r = gz
	case ".zst", ".zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return fileErr(path, 1, ReasonCorruptFile, "not a readable zstd file: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReaderSize(r, 1<<20)
	if startsWithArray(br) {
		return readJSONArray(ctx, path, br, opt, fn)
	}
	return readJSONL(ctx, path, br, opt, fn)
}

func readJSONL(ctx context.Context, path string, r io.Reader, opt readOptions, fn RecordFunc) error {
	lr := &lineReader{r: bufio.NewReaderSize(r, 1<<20), max: opt.maxLineBytes}
	for lineNo := int64(1); ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, size, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fileErr(path, lineNo, ReasonCorruptFile, "reading stopped at line %d: %v", lineNo, err)
		}
		src := topics.Source{File: path, Line: lineNo}
		if size > opt.maxLineBytes {
			lerr := lineErr(ReasonLineTooLong, "line is %d bytes, over the %d-byte limit", size, opt.maxLineBytes)
			if err := fn(topics.Prompt{}, lerr, src, line); err != nil {
				return err
			}
			continue
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
		}
		if len(bytes.Trim(line, " \t\r")) == 0 {
			continue // blank lines separate nothing in JSONL; skip them silently
		}
		ps, unknown, perr := parseRow(path, lineNo, line, opt.dataset)
		if len(unknown) > 0 && opt.unknownKeys != nil {
			opt.unknownKeys(opt.dataset, unknown, src)
		}
		if err := each(fn, ps, perr, src, line); err != nil {
			return err
		}
	}
}

// lineReader splits a stream into lines of any length up to max bytes without holding more than max bytes.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	eof bool
}

// next returns the next line without its line terminator, and the line's full size in bytes. When size is
// over max, line holds only the first max bytes and the rest was skipped.
func (lr *lineReader) next() (line []byte, size int, err error) {
	if lr.eof {
		return nil, 0, io.EOF
	}
	lr.buf = lr.buf[:0]
	var tail [2]byte // the last two bytes of the line as read, terminator included
	for {
		frag, err := lr.r.ReadSlice('\n')
		size += len(frag)
		for _, c := range frag[max(0, len(frag)-2):] {
			tail[0], tail[1] = tail[1], c
		}
		if room := lr.max + 2 - len(lr.buf); room > 0 { // +2: room for the terminator
			lr.buf = append(lr.buf, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			lr.eof = true
			if size == 0 {
				return nil, 0, io.EOF
			}
			break
		}
		if err != nil {
			return nil, 0, err
		}
		break
	}
	if size >= 1 && tail[1] == '\n' {
		size--
		if size >= 1 && tail[0] == '\r' {
			size--
		}
	}
	return lr.buf[:min(len(lr.buf), size, lr.max)], size, nil
}

// countingReader reports the bytes read through it.
type countingReader struct {
	r      io.Reader
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.report != nil {
		c.report(int64(n))
	}
	return n, err
}

// DatasetName returns the dataset name of an input file: its base name without compression and format
// extensions ("data/glaive.jsonl.zst" is "glaive").
func DatasetName(path string) string {
	name := filepath.Base(path)
	for _, exts := range [][]string{{".gz", ".zst", ".zstd"}, {".jsonl", ".ndjson", ".json", ".parquet", ".pq"}} {
		for _, e := range exts {
			if strings.HasSuffix(strings.ToLower(name), e) && len(name) > len(e) {
				name = name[:len(name)-len(e)]
				break
			}
		}
	}
	return name
}

// isParquet reports whether the file is Parquet: by extension, else by its leading magic bytes.
func isParquet(path string, f *os.File) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".parquet", ".pq":
		return true
	case ".gz", ".zst", ".zstd", ".jsonl", ".ndjson", ".json":
		return false
	}
	var magic [4]byte
	n, _ := f.ReadAt(magic[:], 0)
	return n == 4 && string(magic[:]) == "PAR1"
}

// ExpandInputs resolves input arguments: a directory stands for the JSONL and Parquet files directly in it
// (sorted by name); anything else is taken as a file path.
func ExpandInputs(inputs []string) ([]string, error) {
	var out []string
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			return nil, fmt.Errorf("ingest: input %w", err)
		}
		if !st.IsDir() {
			out = append(out, in)
			continue
		}
		entries, err := os.ReadDir(in)
		if err != nil {
			return nil, fmt.Errorf("ingest: input %w", err)
		}
		n := len(out)
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			name := strings.ToLower(e.Name())
			for _, suf := range []string{".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json", ".json.gz", ".json.zst", ".parquet", ".pq"} {
				if strings.HasSuffix(name, suf) {
					out = append(out, filepath.Join(in, e.Name()))
					break
				}
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("ingest: input directory %s holds no .jsonl, .json or .parquet files", in)
		}
	}
	return out, nil
}
