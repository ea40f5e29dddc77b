package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

type stageA struct {
	Lane  string
	Limit int
	Group string
}

func (c *stageA) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Lane, "lane", c.Lane, "A's lane")
	fs.IntVar(&c.Limit, "limit", 7, "A's limit")
	fs.StringVar(&c.Group, "group", "a", "A's group")
}

type stageB struct {
	Lane string
	Wait time.Duration
}

func (c *stageB) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Lane, "lane", c.Lane, "B's lane")
	fs.DurationVar(&c.Wait, "wait", time.Second, "B's wait")
}

// A name two groups define is an error when the flag set is built, naming both; nothing is renamed behind the
// command's back.
func TestCollisionIsAnError(t *testing.T) {
	var a stageA
	var b stageB
	tb := New("both")
	tb.Add("a", a.register)
	tb.Add("b", b.register)
	if _, err := tb.FlagSet(); err == nil || !strings.Contains(err.Error(), "--lane is defined twice, by a and by b") {
		t.Fatalf("FlagSet: %v, want the collision of --lane", err)
	}
	if _, err := tb.Parse(nil); err == nil {
		t.Fatal("Parse of a table with a collision: no error")
	}
	own := New("own")
	own.Add("", func(fs *flag.FlagSet) { fs.Bool("lane", false, "the command's lane") })
	own.Add("a", a.register)
	if _, err := own.FlagSet(); err == nil || !strings.Contains(err.Error(), "by the command and by a") {
		t.Fatalf("FlagSet: %v, want the command's --lane and a's", err)
	}
}

// Options rename, leave out, pick and re-describe a group's settings explicitly; an option naming a setting the
// group lacks is an error too.
func TestOptions(t *testing.T) {
	var a stageA
	var b stageB
	tb := New("run")
	tb.Add("a", a.register, Skip("group"))
	tb.Add("b", b.register, Rename("lane", "b-lane"), Usage("lane", "the lane of b"), Only("lane"))
	fs, err := tb.Parse([]string{"--lane", "x", "--b-lane", "y", "--limit", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Lane != "x" || b.Lane != "y" || a.Limit != 3 || b.Wait != time.Second || a.Group != "a" {
		t.Fatalf("parsed a %+v, b %+v", a, b)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name+"="+f.DefValue) })
	if got := strings.Join(names, " "); got != "b-lane= lane= limit=7" {
		t.Fatalf("flags %q", got)
	}
	if u := fs.Lookup("b-lane").Usage; u != "the lane of b" {
		t.Fatalf("usage %q", u)
	}
	bad := New("bad")
	bad.Add("a", a.register, Skip("no-such"), Rename("nor-this", "x"))
	_, err = bad.FlagSet()
	if err == nil || !strings.Contains(err.Error(), "--no-such, which a does not define") || !strings.Contains(err.Error(), "--nor-this") {
		t.Fatalf("FlagSet: %v, want both unknown names", err)
	}
}

// The default -h shows is the value the setting held when it was added; checks run after every value is
// parsed, and a failed one is Parse's error.
func TestDefaultsAndChecks(t *testing.T) {
	a := stageA{Lane: "short"}
	tb := New("one")
	tb.Add("a", a.register)
	tb.Check(func() error {
		if a.Limit > 10 {
			return errors.New("--limit over 10")
		}
		return nil
	})
	fs, err := tb.FlagSet()
	if err != nil {
		t.Fatal(err)
	}
	if d := fs.Lookup("lane").DefValue; d != "short" {
		t.Fatalf("--lane default %q, want short", d)
	}
	if _, err := tb.Parse([]string{"--limit", "11"}); err == nil || err.Error() != "--limit over 10" {
		t.Fatalf("Parse: %v, want the check's error", err)
	}
	if _, err := tb.Parse([]string{"--limit", "x"}); err == nil || !strings.Contains(err.Error(), "invalid value") {
		t.Fatalf("Parse of a bad value: %v", err)
	}
	if _, err := tb.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse -h: %v", err)
	}
	if got := len(tb.Settings()); got != 3 {
		t.Fatalf("%d settings, want 3", got)
	}
}
