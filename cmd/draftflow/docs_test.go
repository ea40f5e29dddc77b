package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/draftflow/draftflow/topics"
)

// The documentation names subcommands, flags, make targets, environment variables, metrics, Go names, tests and
// files; these tests keep every such name in README.md, docs/*.md and the other READMEs real, so that a rename in
// the code fails here instead of leaving the manual stale. The rules (what counts as a mention):
//
//   - A command line is a line of a code block, or an inline code span, whose program is `draftflow` or
//     `draftflow-bench` (or a path ending in /draftflow or /draftflow-bench; after VAR=value settings, if any): its
//     subcommand must be one main dispatches (for draftflow-bench, one its usage lists), and every --flag after it
//     must be one that subcommand's flag set defines (`--kafka-tls*` names a prefix).
//     `draftflow config` takes, after its own flags, those of the command its --command names (default run).
//   - An inline code span that begins with --flag (`--shards-wait 30s`) names flags of draftflow: each must be
//     defined by at least one subcommand, unless it is listed in foreignFlags with the program it belongs to.
//     Spans that begin with another program (`docker run -p ...`, `kafka.sh restart [--kill]`) are that program's.
//   - `make TARGET` in a code block or span: TARGET must be a rule of the Makefile.
//   - DRAFTFLOW_* variables must occur in the code (any file of the repository but the documentation;
//     `DRAFTFLOW_KAFKA_*` names a prefix), draftflow_* metric names in the program (non-test Go and Python code).
//   - docs/changelog.md names what was renamed or removed: the existence checks skip it (its links are checked).
//   - A span that is a Go test, benchmark or fuzz target name (`TestCapture`, `BenchmarkFlush/rows=256`) must be
//     declared in some _test.go file.
//   - A span that names a Go identifier of a package of this repository (`kafka.DeadLetters`,
//     `generate.Config.ShardsWait`) must be declared there (and the field or method must occur in the package).
//   - A span that is a path inside the repository (`stages/tokenize/chattemplate`, `deploy/k8s/`) must exist.
//   - Every relative link resolves to a file, and a #fragment to a heading of it (GitHub's anchors).
//   - README.md is complete: its command table has a row for every command of the binary (commands(), what main
//     dispatches), every benchmark of draftflow-bench (`draftflow-bench generate`) is named in it, and its topic table has a row
//     for every topic of package topics (topics.All).
//
// The flag sets are the real ones: each subcommand's own function (the one main calls) parses -h and prints its
// flags, which is what a user sees.

// docFiles returns README.md, docs/*.md and the other READMEs of the repository, relative to its root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "deploy/README.md", "deploy/kafka/README.md", "deploy/grafana/README.md",
		"python/README.md", "testdata/sample/README.md"}
	more, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, f := range more {
		rel, _ := filepath.Rel(repoRoot, f)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// changelog is the page of renamed and removed names, which the existence checks skip.
const changelog = "docs/changelog.md"

// repoRoot is the repository root, seen from this package's directory (where go test runs).
const repoRoot = "../.."

// foreignFlags are flags of other programs that the documentation names on their own (`--max-total-tokens`), with
// the program they belong to. A flag listed here is never checked against draftflow's.
var foreignFlags = map[string]string{
	"dataset-name":                        "SGLang's bench_serving",
	"apply-chat-template":                 "SGLang's bench_serving",
	"sharegpt-output-len":                 "SGLang's bench_serving",
	"disable-ignore-eos":                  "SGLang's bench_serving",
	"disable-stream":                      "SGLang's bench_serving",
	"device":                              "SGLang's server",
	"attention-backend":                   "SGLang's server",
	"disable-cuda-graph":                  "SGLang's server",
	"dtype":                               "SGLang's server",
	"enable-metrics":                      "SGLang's server",
	"incremental-streaming-output":        "SGLang's server",
	"enable-return-aux-hidden-states":     "SGLang's server",
	"enable-return-hidden-states":         "SGLang's server",
	"return-hidden-states-mode":           "SGLang's server",
	"return-aux-hidden-state-layer-ids":   "SGLang's server",
	"sleep-on-idle":                       "SGLang's server",
	"speculative-algorithm":               "SGLang's server",
	"disable-radix-cache":                 "SGLang's server",
	"family":                              "deploy/sglang/sglang.sh model",
	"kill":                                "deploy/kafka/kafka.sh restart",
	"seq-length":                          "speculators prepare-data",
	"features":                            "python -m draftflow_data.offline",
	"rows":                                "python -m draftflow_data.offline",
	"layers":                              "deploy/sglang/make_model.py",
	"no-deps":                             "pip install",
	"speculative-draft-attention-backend": "SGLang's server",
}

// flagSet is a subcommand's flags as its -h prints them: each name with its default ("" when -h shows none).
type flagSet map[string]string

// has reports whether the set holds name, or a flag beginning with name when prefix is set.
func (fs flagSet) has(name string, prefix bool) bool {
	if _, ok := fs[name]; ok || !prefix {
		return ok
	}
	for f := range fs {
		if strings.HasPrefix(f, name) {
			return true
		}
	}
	return false
}

// helpFlags runs a subcommand's function with args + -h, as main would, and returns the flags it prints.
func helpFlags(t *testing.T, name string, run func(context.Context, []string) error, args ...string) flagSet {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w // flag.FlagSet prints its usage to os.Stderr when no output is set
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, r); close(done) }()
	err = run(context.Background(), append(args, "-h"))
	os.Stderr = saved
	w.Close()
	<-done
	r.Close()
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("draftflow %s -h: %v, want flag.ErrHelp (flags must be parsed before anything runs)", name, err)
	}
	if !strings.Contains(out.String(), "Usage of draftflow "+name+":") {
		t.Fatalf("draftflow %s -h printed no usage on stderr:\n%s", name, out.String())
	}
	return parseUsage(out.String())
}

// parseUsage returns the flags a flag set's usage text lists.
func parseUsage(usage string) flagSet {
	flags := flagSet{}
	last := ""
	for _, line := range strings.Split(usage, "\n") {
		// PrintDefaults: "  -name type" (or "  -name\t..." for short names), then the usage, indented by a tab,
		// ending in (default X) where the default is not the zero value.
		if m := regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)`).FindStringSubmatch(line); m != nil {
			last = m[1]
			flags[last] = ""
		}
		if d := regexp.MustCompile(`\(default (.*)\)$`).FindStringSubmatch(line); d != nil && last != "" {
			flags[last] = d[1]
		}
	}
	return flags
}

// commandFlags returns every subcommand's flags, keyed "run", "ingest", ..., and those of draftflow-bench's
// benchmarks, keyed "draftflow-bench generate", ....
func commandFlags(t *testing.T) map[string]flagSet {
	t.Helper()
	sets := map[string]flagSet{}
	for _, c := range commands() {
		sets[c.Name] = helpFlags(t, c.Name, c.Run)
	}
	for name, fs := range benchCommandFlags(t) {
		sets["draftflow-bench "+name] = fs
	}
	return sets
}

// benchCommandFlags builds cmd/draftflow-bench and returns the flags of each benchmark its usage lists, as the
// benchmark's -h prints them, keyed by the benchmark's name.
func benchCommandFlags(t *testing.T) map[string]flagSet {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "draftflow-bench")
	if out, err := exec.Command("go", "build", "-o", bin, "../draftflow-bench").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/draftflow-bench: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	_, list, _ := strings.Cut(string(out), "benchmarks:\n")
	sets := map[string]flagSet{}
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)  `).FindAllStringSubmatch(list, -1) {
		usage, err := exec.Command(bin, m[1], "-h").CombinedOutput()
		if err != nil || !strings.Contains(string(usage), "Usage of draftflow-bench "+m[1]+":") {
			t.Fatalf("draftflow-bench %s -h: %v\n%s", m[1], err, usage)
		}
		sets[m[1]] = parseUsage(string(usage))
	}
	if len(sets) == 0 {
		t.Fatalf("draftflow-bench -h lists no benchmark:\n%s", out)
	}
	return sets
}

// makeTargets returns the rules of the Makefile.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:([^=]|$)`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := rule.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "\t") {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	delete(targets, ".PHONY")
	return targets
}

// mention is one thing the documentation names, with where.
type mention struct {
	file string
	line int
	text string // a code block line or an inline code span
	code bool   // from a code block (else an inline span)
}

func (m mention) String() string { return fmt.Sprintf("%s:%d: %q", m.file, m.line, m.text) }

// fence reports whether line opens or closes a fenced code block.
func fence(line string) bool {
	s := strings.TrimLeft(line, " ")
	return strings.HasPrefix(s, "```") || strings.HasPrefix(s, "~~~")
}

// codeMentions returns a Markdown file's code block lines (continuations joined, comments cut) and inline code
// spans (which may run over line ends, as in CommonMark).
func codeMentions(file, text string) []mention {
	var out []mention
	lines := strings.Split(text, "\n")
	inBlock := false
	var para []string // the current paragraph's lines, outside code blocks
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			out = append(out, spans(file, paraStart, strings.Join(para, "\n"))...)
		}
		para = nil
	}
	comment := regexp.MustCompile(`(^|\s)#(\s.*)?$`)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if fence(line) {
			flush()
			inBlock = !inBlock
			continue
		}
		if inBlock {
			start := i
			for strings.HasSuffix(strings.TrimRight(line, " "), "\\") && i+1 < len(lines) && !fence(lines[i+1]) {
				i++
				line = strings.TrimSuffix(strings.TrimRight(line, " "), "\\") + " " + strings.TrimSpace(lines[i])
			}
			line = comment.ReplaceAllString(line, "")
			if strings.TrimSpace(line) != "" {
				out = append(out, mention{file: file, line: start + 1, text: strings.TrimSpace(line), code: true})
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if len(para) == 0 {
			paraStart = i
		}
		para = append(para, line)
	}
	flush()
	return out
}

// spans returns the inline code spans of a paragraph that starts at line first (0-based).
func spans(file string, first int, para string) []mention {
	var out []mention
	for i := 0; i < len(para); {
		if para[i] != '`' {
			i++
			continue
		}
		n := backticks(para, i)
		open := i + n
		closeAt := -1
		for j := open; j < len(para); {
			if para[j] != '`' {
				j++
				continue
			}
			m := backticks(para, j)
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			i = open
			continue
		}
		body := strings.TrimSpace(strings.ReplaceAll(para[open:closeAt], "\n", " "))
		line := first + strings.Count(para[:i], "\n") + 1
		out = append(out, mention{file: file, line: line, text: body})
		i = closeAt + n
	}
	return out
}

// backticks returns the length of the run of backticks at s[i:].
func backticks(s string, i int) int {
	n := 0
	for i+n < len(s) && s[i+n] == '`' {
		n++
	}
	return n
}

var (
	draftflowCmd = regexp.MustCompile(`^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?draftflow(-bench)?\s+([a-z][a-z-]*)(.*)$`)
	flagToken    = regexp.MustCompile(`(?:^|[\s\[(|,="'])--([a-z0-9][a-z0-9-]*)(\*?)`)
	makeCmd      = regexp.MustCompile(`^make\s+(.*)$`)
	envVar       = regexp.MustCompile(`DRAFTFLOW_[A-Z0-9_]*[A-Z0-9]\*?|DRAFTFLOW_\*`)
	metricName   = regexp.MustCompile(`\bdraftflow_[a-z0-9_]*[a-z0-9]`)
	testName     = regexp.MustCompile(`^((?:Test|Benchmark|Fuzz)[A-Z0-9][A-Za-z0-9_]*)(?:/\S*)?$`)
	goName       = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?$`)
	repoPath     = regexp.MustCompile(`^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)*/?$`)
)

// subcommands returns the commands that have subcommands of their own (`draftflow-bench` of
// `draftflow-bench generate`), from the keys of sets, with their subcommands.
func subcommands(sets map[string]flagSet) map[string][]string {
	groups := map[string][]string{}
	for key := range sets {
		if group, sub, ok := strings.Cut(key, " "); ok {
			groups[group] = append(groups[group], sub)
		}
	}
	return groups
}

// display is how a key of sets is written on a command line: `draftflow run`, `draftflow-bench generate`.
func display(key string) string {
	if strings.HasPrefix(key, "draftflow-bench") {
		return key
	}
	return "draftflow " + key
}

// commandOf reads a command line of draftflow or draftflow-bench (see draftflowCmd): the subcommand it runs, as
// sets keys it ("run", "draftflow-bench generate"), and the rest of the line.
func commandOf(seg string, sets map[string]flagSet) (name, rest string, ok bool) {
	loc := draftflowCmd.FindStringSubmatchIndex(seg)
	if loc == nil {
		return "", "", false
	}
	name, rest = seg[loc[4]:loc[5]], seg[loc[5]:]
	if loc[2] >= 0 {
		return "draftflow-bench " + name, rest, true
	}
	return name, rest, true
}

// checkMentions returns the problems with the command lines, flags and make targets of ms.
func checkMentions(ms []mention, sets map[string]flagSet, targets map[string]bool) []string {
	var problems []string
	anyFlag := flagSet{}
	for _, fl := range sets {
		for f := range fl {
			anyFlag[f] = ""
		}
	}
	for _, m := range ms {
		segments := []string{m.text}
		if m.code {
			segments = regexp.MustCompile(`\s(?:\||&&|;)\s`).Split(m.text, -1)
		}
		for _, seg := range segments {
			seg = strings.TrimSpace(seg)
			if mm := makeCmd.FindStringSubmatch(seg); mm != nil {
				for _, w := range strings.Fields(mm[1]) {
					if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
						continue
					}
					if !targets[w] {
						problems = append(problems, fmt.Sprintf("%s: make %s: no such Makefile target", m, w))
					}
					break
				}
				continue
			}
			if name, rest, ok := commandOf(seg, sets); ok {
				flags, ok := sets[name]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: %s: no such subcommand", m, display(name)))
					continue
				}
				if name == "config" { // draftflow config [--command NAME] JOB.yaml [NAME's flags]
					of := "run"
					if c := regexp.MustCompile(`--command[ =]([a-z-]+)`).FindStringSubmatch(rest); c != nil {
						of = c[1]
					}
					flags = maps.Clone(flags)
					maps.Copy(flags, sets[of])
				}
				for _, f := range flagToken.FindAllStringSubmatch(rest, -1) {
					if !flags.has(f[1], f[2] == "*") {
						problems = append(problems, fmt.Sprintf("%s: %s has no flag --%s%s", m, display(name), f[1], f[2]))
					}
				}
				continue
			}
			if m.code || !strings.HasPrefix(seg, "--") {
				continue // another program's command line, or not a command
			}
			for _, f := range flagToken.FindAllStringSubmatch(seg, -1) {
				if _, foreign := foreignFlags[f[1]]; foreign {
					continue
				}
				if !anyFlag.has(f[1], f[2] == "*") {
					problems = append(problems, fmt.Sprintf("%s: --%s%s is no flag of any draftflow subcommand "+
						"(another program's? list it in foreignFlags with the program)", m, f[1], f[2]))
				}
			}
		}
	}
	return problems
}

// readDocs returns the documentation files' texts, keyed by their path relative to the repository root.
func readDocs(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	return docs
}

// allMentions returns the code mentions of every documentation file, in file order.
func allMentions(docs map[string]string) []mention {
	var names []string
	for f := range docs {
		names = append(names, f)
	}
	sort.Strings(names)
	var ms []mention
	for _, f := range names {
		ms = append(ms, codeMentions(f, docs[f])...)
	}
	return ms
}

// TestDocsCommandsAndFlags: every `draftflow <subcommand> --flag` and bare `--flag` the documentation names is
// one the binary has, and every `make <target>` one the Makefile has.
func TestDocsCommandsAndFlags(t *testing.T) {
	sets := commandFlags(t)
	targets := makeTargets(t)
	docs := readDocs(t)
	delete(docs, changelog)
	ms := allMentions(docs)
	for _, p := range checkMentions(ms, sets, targets) {
		t.Error(p)
	}
	// The check must see the documentation's commands at all: the README's two commands and the stages.
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.text] = true
	}
	for _, want := range []string{"make demo", "make test"} {
		found := false
		for text := range seen {
			if strings.HasPrefix(text, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q found in the documentation's code", want)
		}
	}
}

// The rules fail where they should: a flag no subcommand has, a flag of another subcommand, an unknown
// subcommand and an unknown make target are each reported, in a code block and in a span; a foreign program's
// flags are not.
func TestDocsCheckRejectsWrongNames(t *testing.T) {
	sets := commandFlags(t)
	targets := makeTargets(t)
	doc := "Run `draftflow generate --sglang URL --no-such-flag 3`, or `--shards-wait 1s`, `--also-no-such-flag`,\n" +
		"`draftflow sink --sglang URL`, `make no-such-target`, `draftflow frobnicate`, `docker run --foo`.\n\n" +
		"```sh\n" +
		"draftflow tokenize --model DIR \\\n" +
		"   --bogus-flag x    # --not-checked-in-a-comment\n" +
		"bin/draftflow-bench pipeline --namespace x\n" +
		"draftflow-bench generate --multi-turn --turns 4\n" +
		"bin/draftflow-bench sglang --pools 512 --no-pools\n" +
		"speculators train --whatever 1\n" +
		"make chaos CHAOS_ROUNDS=2 && make nothing-here\n" +
		"```\n"
	problems := checkMentions(codeMentions("doc.md", doc), sets, targets)
	want := []string{
		"draftflow generate has no flag --no-such-flag",
		"--also-no-such-flag is no flag of any draftflow subcommand",
		"draftflow sink has no flag --sglang",
		"make no-such-target: no such Makefile target",
		"draftflow frobnicate: no such subcommand",
		"draftflow tokenize has no flag --bogus-flag",
		"draftflow-bench pipeline has no flag --namespace",
		"draftflow-bench sglang has no flag --no-pools",
		"make nothing-here: no such Makefile target",
	}
	got := strings.Join(problems, "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("no problem %q reported; got:\n%s", w, got)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(problems), len(want), got)
	}
}

// TestDocsFlagSetsAreReal: the flag sets come from the subcommands themselves, and they bear out what
// docs/operating.md says about the shared flags: who takes them, and where --metrics-addr serves by default.
func TestDocsFlagSetsAreReal(t *testing.T) {
	sets := commandFlags(t)
	for _, name := range []string{"run", "ingest", "tokenize", "generate", "sink", "capture", "status", "replay", "sim"} {
		for _, f := range []string{"brokers", "partitions", "namespace", "max-message-bytes", "retention", "metrics-addr",
			"pprof", "log-level", "log-format", "kafka-tls", "kafka-sasl-mechanism"} {
			if !sets[name].has(f, false) {
				t.Errorf("draftflow %s has no --%s", name, f)
			}
		}
		want := ""
		if name == "tokenize" || name == "generate" || name == "sink" || name == "capture" {
			want = `":9090"`
		}
		if got := sets[name]["metrics-addr"]; got != want {
			t.Errorf("draftflow %s --metrics-addr defaults to %s, docs/operating.md says %s", name, got, want)
		}
	}
	pipeline := sets["draftflow-bench pipeline"]
	for _, f := range []string{"brokers", "partitions", "log-level", "kafka-tls", "kafka-sasl-mechanism"} {
		if !pipeline.has(f, false) {
			t.Errorf("draftflow-bench pipeline has no --%s; docs/operating.md says it does", f)
		}
	}
	for _, f := range []string{"namespace", "metrics-addr", "log-format", "retention", "max-message-bytes", "pprof"} {
		if pipeline.has(f, false) {
			t.Errorf("draftflow-bench pipeline has --%s; docs/operating.md says it does not", f)
		}
	}
	tools := []string{"encode", "inspect", "merge-turns", "export", "vocab", "draftflow-bench generate", "draftflow-bench sglang"}
	for _, name := range tools {
		fs, ok := sets[name]
		if !ok {
			t.Errorf("no flag set for draftflow %s", name)
		}
		for _, f := range []string{"brokers", "namespace", "metrics-addr", "log-format"} {
			if fs.has(f, false) {
				t.Errorf("draftflow %s has --%s; docs/operating.md says it takes none of the shared flags", name, f)
			}
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, letters, digits, spaces, '-' and '_' kept, spaces -> '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings (outside code blocks), with GitHub's -1, -2 for
// repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	inBlock := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	for sc.Scan() {
		line := sc.Text()
		if fence(line) {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			h := strings.NewReplacer("`", "", "**", "", "*", "").Replace(m[1])
			s := slug(h)
			if n := count[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			count[s]++
		}
	}
	return out
}

// TestDocsLinks: every relative link of the documentation names a file that exists, and its #fragment a
// heading of that file.
func TestDocsLinks(t *testing.T) {
	docs := readDocs(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var names []string
	for f := range docs {
		names = append(names, f)
	}
	sort.Strings(names)
	links := 0
	for _, f := range names {
		inBlock := false
		for i, line := range strings.Split(docs[f], "\n") {
			if fence(line) {
				inBlock = !inBlock
			}
			if inBlock {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				}
				if _, err := os.Stat(filepath.Join(repoRoot, file)); err != nil {
					t.Errorf("%s:%d: link %s: %s does not exist", f, i+1, target, file)
					continue
				}
				if frag == "" {
					continue
				}
				text, ok := docs[file]
				if !ok {
					b, err := os.ReadFile(filepath.Join(repoRoot, file))
					if err != nil {
						t.Errorf("%s:%d: link %s: %v", f, i+1, target, err)
						continue
					}
					text = string(b)
				}
				if !anchors(text)[frag] {
					t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", f, i+1, target, file, frag)
				}
			}
		}
	}
	if links == 0 {
		t.Error("no links found: the README links its docs/ pages")
	}
	// Every docs/ page is reachable from the README.
	for _, f := range names {
		if strings.HasPrefix(f, "docs/") && !strings.Contains(docs["README.md"], "("+f) {
			t.Errorf("README.md does not link %s", f)
		}
	}
}

// codeCorpus returns the text of every file of the repository but the documentation checked here, for the
// names the documentation takes from the code (variables, tests). Build outputs and VCS data are skipped.
func codeCorpus(t *testing.T, docs map[string]string, keep func(path string) bool) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "out", "bin", "docs", "node_modules", "testdata":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." && rel != ".ci" {
				return filepath.SkipDir
			}
			return nil
		}
		if _, isDoc := docs[rel]; isDoc || !keep(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 4<<20 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(data)
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// goPackages returns the non-test Go source of every package of the repository, keyed by package name (the
// sources of packages that share a name are joined).
func goPackages(t *testing.T) map[string]string {
	t.Helper()
	clause := regexp.MustCompile(`(?m)^package ([a-z][a-z0-9_]*)`)
	pkgs := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "out" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := clause.FindSubmatch(data); m != nil {
			pkgs[string(m[1])] += string(data) + "\n"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestDocsNamesExist: the environment variables, metrics, Go names, tests and repository paths the documentation
// names exist.
func TestDocsNamesExist(t *testing.T) {
	docs := readDocs(t)
	ms := allMentions(docs)
	source := codeCorpus(t, docs, func(p string) bool {
		switch filepath.Ext(p) {
		case ".go", ".sh", ".py", ".yaml", ".yml", ".java", ".toml", ".json", ".txt", "":
			return true
		}
		return strings.HasSuffix(p, "Dockerfile")
	})
	// Metric names (and draftflow_data, the Python package) must be in the program itself: a test may still name
	// a metric that is gone, to show that it is.
	program := codeCorpus(t, docs, func(p string) bool {
		return (strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go")) ||
			(strings.HasSuffix(p, ".py") && !strings.Contains(p, "/tests/"))
	})
	tests := map[string]bool{}
	testDecl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	for _, m := range testDecl.FindAllStringSubmatch(source, -1) {
		tests[m[1]] = true
	}
	if len(tests) < 100 {
		t.Fatalf("found only %d test functions in the repository; is repoRoot right?", len(tests))
	}
	packages := goPackages(t)
	ignored := map[string]bool{"out": true, "bin": true}
	for _, m := range ms {
		if m.file == changelog {
			continue
		}
		for _, v := range envVar.FindAllString(m.text, -1) {
			if name := strings.TrimSuffix(v, "*"); !strings.Contains(source, name) {
				t.Errorf("%s: %s occurs nowhere in the code", m, v)
			}
		}
		for _, v := range metricName.FindAllString(m.text, -1) {
			if !strings.Contains(program, v) {
				t.Errorf("%s: %s occurs nowhere in the program (non-test Go and Python code)", m, v)
			}
		}
		if m.code {
			continue
		}
		if gm := goName.FindStringSubmatch(m.text); gm != nil {
			src, ok := packages[gm[1]]
			if !ok {
				continue // not a package of this repository
			}
			decl := regexp.MustCompile(`(?m)^(?:func(?:\s*\([^)]*\))?|type|var|const)\s+` + gm[2] + `\b|^\s+` + gm[2] + `\b`)
			if !decl.MatchString(src) {
				t.Errorf("%s: package %s declares no %s", m, gm[1], gm[2])
			} else if gm[3] != "" && !regexp.MustCompile(`\b`+gm[3]+`\b`).MatchString(src) {
				t.Errorf("%s: package %s has no %s", m, gm[1], gm[3])
			}
			continue
		}
		if tm := testName.FindStringSubmatch(m.text); tm != nil {
			if !tests[tm[1]] {
				t.Errorf("%s: no func %s in any _test.go file", m, tm[1])
			}
			continue
		}
		if repoPath.MatchString(m.text) && strings.Contains(m.text, "/") {
			top := strings.SplitN(m.text, "/", 2)[0]
			if ignored[top] || top == "." || top == ".." {
				continue
			}
			if st, err := os.Stat(filepath.Join(repoRoot, top)); err != nil || !st.IsDir() {
				continue // not a path inside the repository (a URL path, a model name)
			}
			matches, _ := filepath.Glob(filepath.Join(repoRoot, strings.TrimSuffix(m.text, "/")))
			if len(matches) == 0 {
				t.Errorf("%s: no such file or directory in the repository", m)
			}
		}
	}
}

// TestHelpAlignsCommands: `draftflow -h` lists every command, each summary starting in the same column.
func TestHelpAlignsCommands(t *testing.T) {
	var b bytes.Buffer
	usage(&b)
	col := -1
	listed := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue
		}
		name := strings.Fields(line)[0]
		listed[name] = true
		rest := strings.TrimPrefix(line, "  "+name)
		at := len(line) - len(strings.TrimLeft(rest, " "))
		if len(rest) == len(strings.TrimLeft(rest, " ")) || len(rest)-len(strings.TrimLeft(rest, " ")) < 2 {
			t.Errorf("draftflow -h: %q: want at least two spaces between the command and its summary", line)
		}
		if col >= 0 && at != col {
			t.Errorf("draftflow -h: %q: summary at column %d, the others at %d", line, at, col)
		}
		col = at
	}
	for _, c := range commands() {
		if !listed[c.Name] {
			t.Errorf("draftflow -h does not list %s", c.Name)
		}
	}
}

// tableRow is a row of a Markdown table: its line (0-based) and its first cell's inline code span, when the cell
// is one ("" otherwise).
type tableRow struct {
	line  int
	first string
}

// tableRows returns the rows of every table of a Markdown text, outside code blocks.
func tableRows(text string) []tableRow {
	var rows []tableRow
	inBlock := false
	cell := regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*(?:\\||$)")
	for i, line := range strings.Split(text, "\n") {
		if fence(line) {
			inBlock = !inBlock
			continue
		}
		if inBlock || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		row := tableRow{line: i}
		if m := cell.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			row.first = strings.TrimSpace(m[1])
		}
		rows = append(rows, row)
	}
	return rows
}

// readmeCoverage returns what README.md leaves out: a command (of names, the binary's command table) that is not
// the first cell of a row of its tables (the command table: `draftflow NAME ...`), a subcommand of a command
// (from sets: `draftflow-bench generate`) that none of its commands lines or spans names, and a topic that is not the
// first cell of a row (the topic table).
func readmeCoverage(readme string, names []string, sets map[string]flagSet, topicNames []string) []string {
	rowCommands, rowCells := map[string]bool{}, map[string]bool{}
	for _, r := range tableRows(readme) {
		rowCells[r.first] = true
		if m := draftflowCmd.FindStringSubmatch(r.first); m != nil && m[1] == "" {
			rowCommands[m[2]] = true
		}
	}
	named := map[string]bool{}
	for _, m := range codeMentions("README.md", readme) {
		if name, _, ok := commandOf(m.text, sets); ok {
			named[name] = true
		}
	}
	var problems []string
	for _, name := range names {
		if !rowCommands[name] {
			problems = append(problems, fmt.Sprintf("README.md: no row of its command table names `draftflow %s`", name))
		}
	}
	var nested []string
	for group, subs := range subcommands(sets) {
		for _, sub := range subs {
			nested = append(nested, group+" "+sub)
		}
	}
	sort.Strings(nested)
	for _, name := range nested {
		if !named[name] {
			problems = append(problems, fmt.Sprintf("README.md never names `%s`", display(name)))
		}
	}
	for _, topic := range topicNames {
		if !rowCells[topic] {
			problems = append(problems, fmt.Sprintf("README.md: no row of its topic table names `%s`", topic))
		}
	}
	return problems
}

// commandNames returns the names of the binary's commands, as main dispatches them and -h lists them.
func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.Name)
	}
	return names
}

// TestREADMENamesEveryCommandAndTopic: README.md's command table has a row for every command of the binary, every
// subcommand of a command (the benchmarks) is named in it, and its topic table has a row for every topic of
// package topics.
func TestREADMENamesEveryCommandAndTopic(t *testing.T) {
	readme := readDocs(t)["README.md"]
	sets := commandFlags(t)
	for _, p := range readmeCoverage(readme, commandNames(), sets, topics.All()) {
		t.Error(p)
	}
}

// TestREADMECoverageCheckFails: the check above fails where it should. In a copy of README.md with the rows of one
// command (or one topic) taken out, or every mention of one subcommand, it reports exactly that one, for each
// command, subcommand and topic there is.
func TestREADMECoverageCheckFails(t *testing.T) {
	readme := readDocs(t)["README.md"]
	sets := commandFlags(t)
	names, topicNames := commandNames(), topics.All()
	if len(names) < 10 || len(topicNames) < 7 {
		t.Fatalf("%d commands and %d topics: are these the real lists?", len(names), len(topicNames))
	}
	// without returns readme less the table rows whose first cell drop matches.
	without := func(drop func(first string) bool) string {
		lines := strings.Split(readme, "\n")
		for _, r := range tableRows(readme) {
			if drop(r.first) {
				lines[r.line] = ""
			}
		}
		return strings.Join(lines, "\n")
	}
	expect := func(what, doc, want string) {
		t.Helper()
		got := readmeCoverage(doc, names, sets, topicNames)
		if len(got) == 0 || !strings.Contains(got[0], want) {
			t.Errorf("README.md without %s: reported %q, want a problem naming %s", what, got, want)
		}
		for _, p := range got {
			if !strings.Contains(p, want) {
				t.Errorf("README.md without %s: also reported %q", what, p)
			}
		}
	}
	for _, name := range names {
		doc := without(func(first string) bool {
			m := draftflowCmd.FindStringSubmatch(first)
			return m != nil && m[1] == "" && m[2] == name
		})
		expect("the row of draftflow "+name, doc, "`draftflow "+name+"`")
	}
	for group, subs := range subcommands(sets) {
		for _, sub := range subs {
			doc := strings.ReplaceAll(readme, display(group+" "+sub), display(group))
			expect(display(group+" "+sub), doc, "`"+display(group+" "+sub)+"`")
		}
	}
	for _, topic := range topicNames {
		expect("the row of topic "+topic, without(func(first string) bool { return first == topic }), "`"+topic+"`")
	}
}
