package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/stages/ingest"
)

// ingest --progress draws ingest's report as a bar: named ingest, counting input bytes to 100%, and a last
// line of the total on success; a failed run leaves no last line.
func TestIngestBar(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	var p ingest.Progress = &ingestBar{w: &out}
	p.Begin(4 << 20)
	p.Read(4 << 20)
	p.End(true)
	if s := out.String(); !strings.Contains(s, "ingest 4.2 MB/4.2 MB (100%)") || !strings.Contains(s, "\ningest 4.2 MB in ") {
		t.Errorf("bar output %q", s)
	}

	out.Reset()
	p = &ingestBar{w: &out}
	p.Begin(4 << 20)
	p.Read(1 << 20)
	p.End(false)
	if s := out.String(); !strings.Contains(s, "ingest 1.0 MB/4.2 MB (25%)") || strings.Contains(s, " in ") {
		t.Errorf("a failed run's bar output %q", s)
	}
}
