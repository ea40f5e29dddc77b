package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"

	"github.com/draftflow/draftflow/topics"
)

// startsWithArray reports whether a text input is one JSON array of rows (`[ {...}, {...} ]`, how FastChat
// ships ShareGPT) rather than JSONL: its first byte after a byte order mark and whitespace is '['. A JSONL row
// is an object, so no usable JSONL file starts so.
func startsWithArray(br *bufio.Reader) bool {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if len(b) < n {
			return false
		}
		if n <= 3 && bytes.HasPrefix([]byte("\xef\xbb\xbf"), b) {
			continue // part of a byte order mark
		}
		c := b[n-1]
		switch c {
		case ' ', '\t', '\r', '\n':
			if err != nil || n >= br.Size() {
				return false
			}
			continue
		}
		return c == '['
	}
}

// arrayReader cuts a JSON array into its elements without holding more than one element (and at most max
// bytes of it) in memory, counting lines so that each element is located by the line it starts on.
type arrayReader struct {
	r    *bufio.Reader
	max  int
	line int64
	buf  []byte
}

// skipSpace consumes whitespace and returns the next byte.
func (a *arrayReader) skipSpace() (byte, error) {
	for {
		c, err := a.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case '\n':
			a.line++
		case ' ', '\t', '\r':
		default:
			return c, nil
		}
	}
}

// element reads one element, whose first byte first has been read already, up to the ',' or ']' that ends
// it at the array's level. It returns the element (its first max bytes), its full size and the byte that
// ended it.
func (a *arrayReader) element(first byte) (elem []byte, size int, end byte, err error) {
	a.buf = a.buf[:0]
	depth, inStr, esc := 0, false, false
	for c := first; ; {
		if !inStr && depth == 0 && (c == ',' || c == ']') {
			return bytes.TrimRight(a.buf, " \t\r\n"), size, c, nil
		}
		switch {
		case c == '\n':
			a.line++
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case (c == '}' || c == ']') && depth > 0:
			depth--
		}
		size++
		if len(a.buf) < a.max {
			a.buf = append(a.buf, c)
		}
		if c, err = a.r.ReadByte(); err != nil {
			return nil, size, 0, err
		}
	}
}

// readJSONArray reads an input that is one JSON array of rows, as readJSONL reads lines: each element is a
// row, located by the line its first byte is on (topics.Source.Line) and by its index in the array, which a
// rejection's reason names. A file cut off inside the array, or with more after its closing ']', is a
// FileError from the element where reading stopped.
func readJSONArray(ctx context.Context, path string, br *bufio.Reader, opt readOptions, fn RecordFunc) error {
	a := &arrayReader{r: br, max: opt.maxLineBytes, line: 1}
	if _, err := br.Discard(len(peekBOM(br))); err != nil {
		return fileErr(path, 1, ReasonCorruptFile, "reading stopped at line 1: %v", err)
	}
	if c, err := a.skipSpace(); err != nil || c != '[' { // startsWithArray said it is
		return fileErr(path, a.line, ReasonCorruptFile, "not a JSON array")
	}
	for index := 0; ; index++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err := a.skipSpace()
		if err != nil {
			return a.cutOff(path, index, err)
		}
		if c == ']' && index == 0 {
			return a.trailing(path) // []
		}
		start := a.line
		elem, size, end, err := a.element(c)
		if err != nil {
			return a.cutOff(path, index, err)
		}
		src := topics.Source{File: path, Line: start}
		var ps []topics.Prompt
		var perr error
		switch {
		case size > opt.maxLineBytes:
			perr = lineErr(ReasonLineTooLong, "element %d of the JSON array is %d bytes, over the %d-byte limit", index, size, opt.maxLineBytes)
		case len(elem) == 0:
			perr = lineErr(ReasonInvalidJSON, "invalid JSON: element %d of the JSON array is empty (a comma too many)", index)
		default:
			var unknown []string
			ps, unknown, perr = parseRow(path, start, elem, opt.dataset)
			var le *LineError
			if errors.As(perr, &le) {
				perr = &LineError{Reason: le.Reason, Detail: "element " + strconv.Itoa(index) + " of the JSON array: " + le.Detail}
			}
			if len(unknown) > 0 && opt.unknownKeys != nil {
				opt.unknownKeys(opt.dataset, unknown, src)
			}
		}
		if err := each(fn, ps, perr, src, elem); err != nil {
			return err
		}
		if end == ']' {
			return a.trailing(path)
		}
	}
}

// cutOff is the FileError of an array that ends (or breaks) before its closing ']'.
func (a *arrayReader) cutOff(path string, index int, err error) error {
	if errors.Is(err, io.EOF) {
		return fileErr(path, a.line, ReasonCorruptFile, "the JSON array ends at line %d without its closing ']' (in element %d): the file is cut short", a.line, index)
	}
	return fileErr(path, a.line, ReasonCorruptFile, "reading stopped at line %d (element %d of the JSON array): %v", a.line, index, err)
}

// trailing checks that only whitespace follows the array's closing ']'.
func (a *arrayReader) trailing(path string) error {
	_, err := a.skipSpace()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fileErr(path, a.line, ReasonCorruptFile, "reading stopped at line %d: %v", a.line, err)
	}
	return fileErr(path, a.line, ReasonCorruptFile, "more after the JSON array's closing ']' at line %d: a .json input holds one array of rows; "+
		"for one row per line, use JSONL", a.line)
}

// peekBOM returns the UTF-8 byte order mark at the start of br, if there is one.
func peekBOM(br *bufio.Reader) []byte {
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		return b
	}
	return nil
}
