package pipeline

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/draftflow/draftflow/topics"
)

// RejectedFileName is the file `run` writes its rejections to, beside the run directories of its --out.
const RejectedFileName = "rejected.jsonl"

// maxRejectionExamples is how many rejections a run's summary shows.
const maxRejectionExamples = 5

// rejectionLog keeps a run's rejections where the user finds them after the run (its embedded broker, and the
// rejected topic with it, are gone): one JSON line each, with the input file, line, stage, class and reason,
// in a file of the output directory. It also keeps the first few, for the summary.
type rejectionLog struct {
	path string

	mu       sync.Mutex
	f        *os.File
	w        *bufio.Writer
	n        int            // rejections written
	byStage  map[string]int // rejections read, per stage
	examples []topics.Rejection
	err      error
}

// newRejectionLog prepares dir/RejectedFileName; an earlier run's file there is removed (it describes that
// run), and the file is created with the first rejection.
func newRejectionLog(dir string) (*rejectionLog, error) {
	path := filepath.Join(dir, RejectedFileName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return &rejectionLog{path: path, byStage: map[string]int{}}, nil
}

// RejectionLine is one line of a run's rejections file (RejectedFileName), as JSON.
type RejectionLine struct {
	File    string `json:"file,omitempty"`
	Line    int64  `json:"line,omitempty"`
	Stage   string `json:"stage"`
	Class   string `json:"class,omitempty"`
	Reason  string `json:"reason"`
	ID      string `json:"id,omitempty"`
	Dataset string `json:"dataset,omitempty"`
	// Turn and Origin name the row of a record brought in with its output (topics.Kept), which a conversation
	// can bring several of.
	Turn   int    `json:"turn,omitempty"`
	Origin string `json:"origin,omitempty"`
}

// add writes one rejection.
func (l *rejectionLog) add(r *topics.Rejection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byStage[r.Stage]++
	if len(l.examples) < maxRejectionExamples {
		ex := *r
		ex.Payload = nil
		l.examples = append(l.examples, ex)
	}
	if l.err != nil {
		return
	}
	if l.f == nil {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
			l.err = err
			return
		}
		if l.f, l.err = os.Create(l.path); l.err != nil {
			return
		}
		l.w = bufio.NewWriter(l.f)
	}
	b, err := json.Marshal(RejectionLine{File: r.Source.File, Line: r.Source.Line, Stage: r.Stage, Class: r.Class,
		Reason: r.Reason, ID: r.ID, Dataset: r.Dataset, Turn: r.Turn, Origin: r.Origin})
	if err != nil {
		l.err = err
		return
	}
	l.w.Write(append(b, '\n'))
	l.n++
}

// read returns the number of rejections of stage read so far.
func (l *rejectionLog) read(stage string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byStage[stage]
}

// close flushes the file and returns where it is ("" when the run rejected nothing), the first rejections,
// and the first error writing it.
func (l *rejectionLog) close() (path string, examples []topics.Rejection, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		if err := l.w.Flush(); err != nil && l.err == nil {
			l.err = err
		}
		if err := l.f.Close(); err != nil && l.err == nil {
			l.err = err
		}
		l.f = nil
		path = l.path
	}
	if l.err != nil {
		return path, l.examples, fmt.Errorf("write %s: %w", l.path, l.err)
	}
	return path, l.examples, nil
}
