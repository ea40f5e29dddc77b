package replay

import (
	"slices"
	"testing"

	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/topics"
)

func TestParseOffsets(t *testing.T) {
	got, err := ParseOffsets("tokenized:0=10, tokenized:3=0,prompts:1=7")
	if err != nil || got["tokenized"][0] != 10 || got["tokenized"][3] != 0 || got["prompts"][1] != 7 || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "tokenized:0", "tokenized=3", ":0=1", "t:x=1", "t:0=-1", "t:-1=0"} {
		if _, err := ParseOffsets(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestResolve(t *testing.T) {
	g, tops, err := Resolve("generate", "", nil, Target{Earliest: true})
	if err != nil || g != generate.DefaultGroup || !slices.Equal(tops, []string{topics.TopicTokenized}) {
		t.Fatalf("generate: %q %v %v", g, tops, err)
	}
	offs := map[string]map[int]int64{"b": {0: 1}, "a": {1: 2}}
	g, tops, err = Resolve("sink", "mine", nil, Target{Offsets: offs})
	if err != nil || g != "mine" || !slices.Equal(tops, []string{"a", "b"}) {
		t.Fatalf("offsets: %q %v %v", g, tops, err)
	}
	for name, bad := range map[string]func() error{
		"unknown stage":    func() error { _, _, err := Resolve("ingest", "", nil, Target{Latest: true}); return err },
		"no group":         func() error { _, _, err := Resolve("", "", []string{"a"}, Target{Latest: true}); return err },
		"no topic":         func() error { _, _, err := Resolve("", "g", nil, Target{Latest: true}); return err },
		"offset off-topic": func() error { _, _, err := Resolve("", "g", []string{"a"}, Target{Offsets: offs}); return err },
	} {
		if bad() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
