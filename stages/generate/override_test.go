package generate

import (
	"flag"
	"io"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

func TestOverrideFlagsApplyAndValidate(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--override-temperature=0.3", "--override-max-new-tokens=64", "--override-seed=9"}); err != nil {
		t.Fatal(err)
	}
	temp := 1.0
	in := topics.Sampling{MaxNewTokens: 4096, Temperature: &temp, TopP: 0.9, Lane: "long"}
	out := c.Override.Apply(in)
	if out.MaxNewTokens != 64 || *out.Temperature != 0.3 || *out.Seed != 9 || out.TopP != 0.9 || out.Lane != "long" {
		t.Fatalf("applied: %+v", out)
	}
	if *in.Temperature != 1.0 || in.Seed != nil {
		t.Fatal("Apply changed the record's own settings")
	}
	if err := c.Override.validate(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--override-top-p=1.5"}, {"--override-temperature=-1"}, {"--override-max-new-tokens=0"}} {
		var o Config
		fs := flag.NewFlagSet("generate", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if o.Override.validate() == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if err := fs.Parse([]string{"--override-top-k=x"}); err == nil {
		t.Error("a non-number accepted")
	}
}
