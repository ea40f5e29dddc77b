package ingest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/topics"
)

// Settings holds per-dataset generation settings, as read from a settings file:
//
//	{
//	  "default":  {"max_new_tokens": 4096, "temperature": 0.6, "top_p": 0.95},
//	  "datasets": {
//	    "glaive":            {"lane": "short", "max_new_tokens": 10240},
//	    "opencodeinstruct":  {"lane": "long",  "max_new_tokens": 16384, "template_kwargs": {"enable_thinking": true}}
//	  }
//	}
//
// Keys of a section are those of topics.Sampling: max_new_tokens, temperature, top_p, top_k, min_p,
// seed (or sampling_seed), stop_token_ids, lane, template_kwargs; turns: "all" regenerates every
// assistant turn of a conversation, each against the target's own earlier answers, "last" only the turn
// after the last user message (default: Config.Turns, itself "all" by default); and replies: "generate" (the
// target generates every reply again) or "keep" (each assistant reply of the dataset is kept as a row, nothing
// is generated; with turns "last" only the last reply; default: Config.Replies, itself "generate"). Unknown keys
// are an error, so a typo does not silently fall back to a default.
type Settings struct {
	// Default applies to every dataset.
	Default topics.Sampling
	// Datasets holds per-dataset overrides of Default, by dataset name.
	Datasets map[string]topics.Sampling
	// Turns holds the turns setting of the default section (key "") and of each dataset that sets one.
	Turns map[string]string
	// Replies holds the replies setting of the default section (key "") and of each dataset that sets one.
	Replies map[string]string
}

// Values of the turns setting.
const (
	TurnsAll  = "all"
	TurnsLast = "last"
)

// Values of the replies setting.
const (
	// RepliesGenerate: the target model generates each assistant turn again.
	RepliesGenerate = "generate"
	// RepliesKeep: each assistant reply of the dataset is kept as the output of a row (topics.OriginDataset).
	RepliesKeep = "keep"
)

func checkTurns(v string) error {
	if v != TurnsAll && v != TurnsLast {
		return fmt.Errorf("turns %q: want %q or %q", v, TurnsAll, TurnsLast)
	}
	return nil
}

func checkReplies(v string) error {
	if v != RepliesGenerate && v != RepliesKeep {
		return fmt.Errorf("replies %q: want %q or %q", v, RepliesGenerate, RepliesKeep)
	}
	return nil
}

// TurnsFor returns the turns setting of dataset: its own section's, else the default section's, else base.
func (s Settings) TurnsFor(dataset, base string) string {
	return sectionValue(s.Turns, dataset, base)
}

// RepliesFor returns the replies setting of dataset: its own section's, else the default section's, else base.
func (s Settings) RepliesFor(dataset, base string) string {
	return sectionValue(s.Replies, dataset, base)
}

func sectionValue(m map[string]string, dataset, base string) string {
	if v, ok := m[dataset]; ok {
		return v
	}
	if v, ok := m[""]; ok {
		return v
	}
	return base
}

// samplingJSON is one section of a settings file; pointers tell "absent" from zero.
type samplingJSON struct {
	MaxNewTokens   *int           `json:"max_new_tokens"`
	Temperature    *float64       `json:"temperature"`
	TopP           *float64       `json:"top_p"`
	TopK           *int           `json:"top_k"`
	MinP           *float64       `json:"min_p"`
	Seed           *int64         `json:"seed"`
	SamplingSeed   *int64         `json:"sampling_seed"`
	StopTokenIDs   []int          `json:"stop_token_ids"`
	Lane           *string        `json:"lane"`
	TemplateKwargs map[string]any `json:"template_kwargs"`
	Turns          *string        `json:"turns"`
	Replies        *string        `json:"replies"`
}

func (s samplingJSON) sampling() (topics.Sampling, error) {
	var out topics.Sampling
	if s.MaxNewTokens != nil {
		if *s.MaxNewTokens < 0 {
			return out, fmt.Errorf("max_new_tokens %d is negative", *s.MaxNewTokens)
		}
		out.MaxNewTokens = *s.MaxNewTokens
	}
	if s.Temperature != nil {
		if *s.Temperature < 0 {
			return out, fmt.Errorf("temperature %g is negative", *s.Temperature)
		}
		t := *s.Temperature
		out.Temperature = &t
	}
	if s.TopP != nil {
		if *s.TopP < 0 || *s.TopP > 1 {
			return out, fmt.Errorf("top_p %g is outside [0, 1]", *s.TopP)
		}
		out.TopP = *s.TopP
	}
	if s.TopK != nil {
		out.TopK = *s.TopK
	}
	if s.MinP != nil {
		out.MinP = *s.MinP
	}
	if s.Seed != nil && s.SamplingSeed != nil && *s.Seed != *s.SamplingSeed {
		return out, fmt.Errorf("seed %d and sampling_seed %d disagree", *s.Seed, *s.SamplingSeed)
	}
	for _, p := range []*int64{s.Seed, s.SamplingSeed} {
		if p != nil {
			v := *p
			out.Seed = &v
		}
	}
	out.StopTokenIDs = s.StopTokenIDs
	if s.Lane != nil {
		out.Lane = *s.Lane
	}
	out.TemplateKwargs = s.TemplateKwargs
	return out, nil
}

// LoadSettings reads a settings file (JSON, see Settings).
func LoadSettings(path string) (Settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Settings{}, fmt.Errorf("ingest: settings: %w", err)
	}
	s, err := ParseSettings(data)
	if err != nil {
		return Settings{}, fmt.Errorf("ingest: settings %s: %w", path, err)
	}
	return s, nil
}

// ParseSettings decodes the JSON of a settings file.
func ParseSettings(data []byte) (Settings, error) {
	var file struct {
		Default  samplingJSON            `json:"default"`
		Datasets map[string]samplingJSON `json:"datasets"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return Settings{}, err
	}
	s := Settings{Turns: map[string]string{}, Replies: map[string]string{}}
	var err error
	if s.Default, err = file.Default.sampling(); err != nil {
		return Settings{}, fmt.Errorf("default: %w", err)
	}
	if err := s.section("", file.Default); err != nil {
		return Settings{}, fmt.Errorf("default: %w", err)
	}
	s.Datasets = make(map[string]topics.Sampling, len(file.Datasets))
	for name, sec := range file.Datasets {
		if s.Datasets[name], err = sec.sampling(); err != nil {
			return Settings{}, fmt.Errorf("datasets.%s: %w", name, err)
		}
		if err := s.section(name, sec); err != nil {
			return Settings{}, fmt.Errorf("datasets.%s: %w", name, err)
		}
	}
	return s, nil
}

// section records the turns and replies settings of a section (name "" for the default one).
func (s *Settings) section(name string, sec samplingJSON) error {
	if t := sec.Turns; t != nil {
		if err := checkTurns(*t); err != nil {
			return err
		}
		s.Turns[name] = *t
	}
	if r := sec.Replies; r != nil {
		if err := checkReplies(*r); err != nil {
			return err
		}
		s.Replies[name] = *r
	}
	return nil
}

// For returns the settings of dataset: base (the flags), overridden field by field by the file's default
// section, then by the dataset's own section. template_kwargs are merged key by key.
func (s Settings) For(dataset string, base topics.Sampling) topics.Sampling {
	out := Merge(base, s.Default)
	if ds, ok := s.Datasets[dataset]; ok {
		out = Merge(out, ds)
	}
	return out
}

// Merge returns base with every field that over sets (non-zero, or non-nil for pointers) replaced.
func Merge(base, over topics.Sampling) topics.Sampling {
	out := base
	if over.MaxNewTokens != 0 {
		out.MaxNewTokens = over.MaxNewTokens
	}
	if over.Temperature != nil {
		out.Temperature = over.Temperature
	}
	if over.TopP != 0 {
		out.TopP = over.TopP
	}
	if over.TopK != 0 {
		out.TopK = over.TopK
	}
	if over.MinP != 0 {
		out.MinP = over.MinP
	}
	if over.Seed != nil {
		out.Seed = over.Seed
	}
	if over.StopTokenIDs != nil {
		out.StopTokenIDs = over.StopTokenIDs
	}
	if over.Lane != "" {
		out.Lane = over.Lane
	}
	if len(over.TemplateKwargs) > 0 {
		kw := make(map[string]any, len(base.TemplateKwargs)+len(over.TemplateKwargs))
		maps.Copy(kw, base.TemplateKwargs)
		maps.Copy(kw, over.TemplateKwargs)
		out.TemplateKwargs = kw
	}
	return out
}

// RegisterFlags adds ingest's flags to fs: --input (repeatable; a directory means its .jsonl/.parquet
// files), --dataset, --settings, the default generation settings --max-new-tokens, --temperature,
// --top-p, --top-k, --seed, --lane, and --turns, --replies and --max-line-bytes. Kafka flags (--brokers)
// belong to the caller.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*stringList)(&c.Inputs), "input", "input `file` (JSONL, .jsonl.gz, .jsonl.zst or Parquet) or directory; repeatable")
	fs.StringVar(&c.Dataset, "dataset", c.Dataset, "dataset `name` for every input (default: each file's stem)")
	fs.StringVar(&c.SettingsFile, "settings", c.SettingsFile, "JSON `file` of per-dataset generation settings ({\"default\": {...}, \"datasets\": {\"name\": {...}}})")
	fs.IntVar(&c.Defaults.MaxNewTokens, "max-new-tokens", c.Defaults.MaxNewTokens, "default completion token budget (0: server default)")
	fs.Var(&floatPtr{&c.Defaults.Temperature}, "temperature", "default sampling temperature (unset: server default; 0: greedy)")
	fs.Float64Var(&c.Defaults.TopP, "top-p", c.Defaults.TopP, "default nucleus sampling top_p (0: server default)")
	fs.IntVar(&c.Defaults.TopK, "top-k", c.Defaults.TopK, "default top_k (0: server default)")
	fs.Var(&intPtr{&c.Defaults.Seed}, "seed", "default sampling seed (unset: unseeded)")
	fs.StringVar(&c.Defaults.Lane, "lane", c.Defaults.Lane, "default scheduling `lane` (for example short or long)")
	fs.StringVar(&c.Turns, "turns", c.Turns, "which assistant turns to regenerate (or keep, with --replies keep) unless the settings say otherwise: all (each against the target's earlier answers) or last")
	fs.StringVar(&c.Replies, "replies", c.Replies, "what becomes of the dataset's assistant replies unless the settings say otherwise: generate (the target generates each again) "+
		"or keep (each reply is kept as a row's output, rendered by the chat template; nothing is generated)")
	fs.IntVar(&c.MaxLineBytes, "max-line-bytes", c.MaxLineBytes, "longest accepted JSONL line in bytes (0: 32 MiB)")
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty input path")
	}
	*l = append(*l, v)
	return nil
}

// floatPtr is a float flag whose unset state is nil.
type floatPtr struct{ p **float64 }

func (f *floatPtr) String() string {
	if f.p == nil || *f.p == nil {
		return ""
	}
	return strconv.FormatFloat(**f.p, 'g', -1, 64)
}

func (f *floatPtr) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	if x < 0 {
		return fmt.Errorf("%g is negative", x)
	}
	*f.p = &x
	return nil
}

// intPtr is an int64 flag whose unset state is nil.
type intPtr struct{ p **int64 }

func (f *intPtr) String() string {
	if f.p == nil || *f.p == nil {
		return ""
	}
	return strconv.FormatInt(**f.p, 10)
}

func (f *intPtr) Set(v string) error {
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return err
	}
	*f.p = &x
	return nil
}

// datasetNames returns the dataset names of s, sorted.
func (s Settings) datasetNames() []string {
	names := make([]string, 0, len(s.Datasets))
	for n := range s.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
