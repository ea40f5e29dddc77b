package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/features"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// captureFlags are the flags of capture beside capturestage.Config's: where the layers and the hidden size come
// from when the servers cannot say.
type captureFlags struct {
	numLayers int
	modelDir  string
}

func (f *captureFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.numLayers, "num-layers", 0, "the target model's decoder layers, for the default --aux-layers 2,L/2,L-3 (default: from --model's config.json)")
	fs.StringVar(&f.modelDir, "model", "", "the target model's directory (its config.json gives the layer count and the hidden size)")
}

// cmdCapture is `draftflow capture`: the capture stage on its own.
func cmdCapture(ctx context.Context, args []string) error {
	fs := newFlagSet("capture")
	var c common
	c.register(fs, ":9090")
	cfg := capturestage.Config{Dir: "out/run"}
	fs.StringVar(&cfg.Dir, "out", cfg.Dir, "the sink's output directory: the feature files go beside its shards")
	mergeFlags(fs, "capture", cfg.RegisterFlags)
	var cf captureFlags
	cf.register(fs)
	kc, err := prepare(ctx, &c, fs, args, capturestage.Stage)
	if err != nil {
		return err
	}
	if cfg.Aux == "" || cfg.Final == "" {
		return errors.New("capture needs both servers: --sglang-aux URL and --sglang-final URL (docs/hidden-states.md says how to start them)")
	}
	if err := resolveAuxLayers(&cfg, cf); err != nil {
		return err
	}
	defer startStatus(ctx, &kc, c.reg, withGroup(statusCapture, cfg.Group))()
	cfg.Kafka, cfg.Logger, cfg.Registerer, cfg.Ready = kc, kc.Logger, c.reg, c.ready
	cfg.Progress = stderr()
	printCaptureEstimate(stderr(), modelHidden(cf.modelDir), len(cfg.AuxLayers), pendingTokens(cfg.Dir), "tokens in the shards without a feature file", cfg.Dir)
	return capturestage.Run(ctx, cfg)
}

// resolveAuxLayers fills cfg.AuxLayers from --num-layers or the model's config.json when --aux-layers is unset.
func resolveAuxLayers(cfg *capturestage.Config, f captureFlags) error {
	if len(cfg.AuxLayers) > 0 {
		return nil
	}
	n := f.numLayers
	if n == 0 && f.modelDir != "" {
		n = modelConfigInt(f.modelDir, "num_hidden_layers")
	}
	if n == 0 {
		return errors.New("capture: name the aux layers (--aux-layers 2,18,33) or the model's layer count (--num-layers, or --model DIR with a config.json)")
	}
	if n < 7 {
		return fmt.Errorf("capture: a model of %d layers: SGLang's default EAGLE-3 capture (2, L/2, L-3) needs at least 7 (docs/hidden-states.md); name them with --aux-layers", n)
	}
	cfg.AuxLayers = capturestage.DefaultAuxLayers(n)
	return nil
}

// modelConfigInt reads an integer field of a model directory's config.json (or its text_config), 0 if absent.
func modelConfigInt(dir, field string) int {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return 0
	}
	for _, o := range []map[string]any{m, asObject(m["text_config"])} {
		if v, ok := o[field].(float64); ok {
			return int(v)
		}
	}
	return 0
}

func asObject(v any) map[string]any {
	o, _ := v.(map[string]any)
	return o
}

// modelHidden is the model's hidden size from its config.json, 0 when unknown.
func modelHidden(dir string) int {
	if dir == "" {
		return 0
	}
	return modelConfigInt(dir, "hidden_size")
}

// pendingTokens counts the tokens of the shards under dir that have no feature file yet.
func pendingTokens(dir string) int64 {
	runs, _ := shard.RunDirs(dir)
	var n int64
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			continue
		}
		for _, sh := range m.Shards {
			if _, err := os.Stat(features.PathFor(filepath.Join(rd, sh.File))); err != nil {
				n += sh.Tokens
			}
		}
	}
	return n
}

// measuredRatio is the compressed/raw ratio of the feature files already under dir, 0 when there are none.
func measuredRatio(dir string) (float64, int) {
	runs, _ := shard.RunDirs(dir)
	var raw, stored float64
	for _, rd := range runs {
		m, err := features.ReadManifest(rd)
		if err != nil || m == nil {
			continue
		}
		for _, f := range m.Files {
			raw += float64(f.Tokens) * float64(m.Header.Width()) * 2
			stored += float64(f.Bytes)
		}
		if m.Header.Hidden > 0 {
			return stored / max(raw, 1), m.Header.Hidden
		}
	}
	return 0, 0
}

// printCaptureEstimate says what a capture will write: bytes per token (bf16, aux layers + final) x tokens.
func printCaptureEstimate(w io.Writer, hidden, auxLayers int, tokens int64, tokensWhat, dir string) {
	ratio, seen := measuredRatio(dir)
	if hidden == 0 {
		hidden = seen
	}
	if hidden == 0 {
		fmt.Fprintf(w, "capture: %d aux layers + the final state per token, 2 bytes a value (bf16) x the hidden size (not known before the first answer; at Kimi-K2's 7168: %s a token raw)\n",
			auxLayers, humanBytes(float64((auxLayers+1)*7168*2)))
		return
	}
	raw := float64((auxLayers + 1) * hidden * 2)
	ratioText := "compression not yet measured here (~0.70 on N(0,1) values at Kimi width, docs/hidden-states.md)"
	est := raw * 0.70
	if ratio > 0 {
		ratioText = fmt.Sprintf("compression %.2f measured on this directory's feature files", ratio)
		est = raw * ratio
	}
	fmt.Fprintf(w, "capture: %s a token raw ((%d aux + final) x hidden %d x 2 bytes), %s\n", humanBytes(raw), auxLayers, hidden, ratioText)
	if tokens > 0 {
		fmt.Fprintf(w, "capture: %d %s -> about %s raw, %s stored\n", tokens, tokensWhat, humanBytes(raw*float64(tokens)), humanBytes(est*float64(tokens)))
	}
}

func humanBytes(n float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// runCapture is the capture part of `draftflow run`: the servers (in-process simulators for "sim") and the
// stage's configuration.
type runCapture struct {
	cfg      capturestage.Config
	flags    captureFlags
	simSize  int // the hidden size of simulated capture servers
	stops    []func()
	inputLen int64 // bytes of the run's inputs, for the estimate
}

func (rc *runCapture) register(fs *flag.FlagSet) {
	fs.StringVar(&rc.cfg.Aux, "capture-aux", "", "capture the rows' EAGLE-3 features: the aux-capture server URL, or sim (with --capture-final)")
	fs.StringVar(&rc.cfg.Final, "capture-final", "", "capture: the final-state server URL, or sim (with --capture-aux)")
	fs.IntVar(&rc.cfg.Concurrency, "capture-concurrency", 0, "capture: requests in flight per capture server (default 4)")
	fs.Func("capture-aux-layers", "capture: the decoder layers the aux server captures (default 2,L/2,L-3 from --capture-num-layers or the model's config.json)", func(s string) error {
		l, err := capturestage.ParseLayers(s)
		rc.cfg.AuxLayers = l
		return err
	})
	fs.IntVar(&rc.flags.numLayers, "capture-num-layers", 0, "capture: the target model's decoder layers (default: the model's config.json)")
	fs.IntVar(&rc.simSize, "capture-sim-hidden", sim.DefaultHiddenSize, "capture with sim: the simulated model's hidden size")
}

// enabled reports whether the run captures.
func (rc *runCapture) enabled() bool { return rc.cfg.Aux != "" || rc.cfg.Final != "" }

// prepare checks the settings and starts simulated capture servers for "sim".
func (rc *runCapture) prepare(model *tokenize.Model, modelDir string, ctxLen int, log *slog.Logger) error {
	if rc.cfg.Aux == "" || rc.cfg.Final == "" {
		return errors.New("capture needs both --capture-aux and --capture-final (URLs, or sim for both)")
	}
	if (rc.cfg.Aux == "sim") != (rc.cfg.Final == "sim") {
		return errors.New("--capture-aux sim needs --capture-final sim: a simulated server's features only pair with another's")
	}
	if rc.cfg.Aux == "sim" {
		if len(rc.cfg.AuxLayers) == 0 {
			rc.cfg.AuxLayers = []int{2, 4, 5}
		}
		for i, mode := range []string{sim.HiddenAux, sim.HiddenFinal} {
			scfg := sim.Config{Instant: true, HiddenStates: mode, HiddenSize: rc.simSize, AuxLayers: rc.cfg.AuxLayers, DisableRadixCache: true}
			url, stop, err := startSim(scfg, model, ctxLen, log)
			if err != nil {
				rc.stop()
				return err
			}
			rc.stops = append(rc.stops, stop)
			if i == 0 {
				rc.cfg.Aux = url
			} else {
				rc.cfg.Final = url
			}
		}
	}
	rc.flags.modelDir = modelDir
	return resolveAuxLayers(&rc.cfg, rc.flags)
}

func (rc *runCapture) stop() {
	for _, s := range rc.stops {
		s()
	}
	rc.stops = nil
}

// hidden is the hidden size the run's features will have, 0 when unknown.
func (rc *runCapture) hidden() int {
	if len(rc.stops) > 0 {
		return rc.simSize
	}
	return modelHidden(rc.flags.modelDir)
}

// estimate prints what the run's capture will write, from the inputs' size (about 4 bytes of text a token,
// and outputs as long as the replies they replace).
func (rc *runCapture) estimate(w io.Writer, inputs []string, dir string) {
	var n int64
	for _, in := range inputs {
		if st, err := os.Stat(in); err == nil {
			n += st.Size()
		}
	}
	printCaptureEstimate(w, rc.hidden(), len(rc.cfg.AuxLayers), n/4, fmt.Sprintf("tokens expected (the inputs' %s at ~4 bytes of text a token)", humanBytes(float64(n))), dir)
}

// finish captures every shard of dir that has no complete feature file yet, once the pipeline's stages have
// stopped (the sink's final flush is committed): it announces every shard again and runs the stage until each
// has its file and the stage's group has committed every announcement (waitCommitted). Shards the stage already
// did during the run are skipped.
func (rc *runCapture) finish(ctx context.Context, kc kafka.Config, dir string, base capturestage.Config, progress io.Writer) error {
	kcl, err := kafka.NewClient(kc)
	if err != nil {
		return err
	}
	defer kcl.Close()
	n, err := sink.AnnounceShards(ctx, kcl, dir)
	if err != nil {
		return err
	}
	ends, err := kcl.Admin().EndOffsets(ctx, topics.TopicShardFiles)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	runs, _ := shard.RunDirs(dir)
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			return err
		}
		for _, sh := range m.Shards {
			want[filepath.Join(rd, sh.File)] = true
		}
	}
	if n != len(want) {
		return fmt.Errorf("capture: announced %d shards, the manifests list %d", n, len(want))
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var stopping sync.Once
	cfg := base
	cfg.Progress = progress
	cfg.OnShard = func(path string) {
		mu.Lock()
		delete(want, path)
		left := len(want)
		mu.Unlock()
		if left == 0 {
			stopping.Do(func() {
				go func() {
					waitCommitted(cctx, kcl.Admin(), cmp.Or(cfg.Group, capturestage.DefaultGroup), ends, 10*time.Second)
					cancel()
				}()
			})
		}
	}
	if len(want) == 0 {
		return nil
	}
	err = capturestage.Run(cctx, cfg)
	mu.Lock()
	left := len(want)
	mu.Unlock()
	if left > 0 {
		return errors.Join(fmt.Errorf("capture: %d shards still without a feature file", left), err)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// waitCommitted waits, at most limit, until group has committed every offset of the shard-files topic up to
// ends. A shard announced during the run and again by finish is done once; without the wait the stage would
// stop with the later announcement unread, and the group would keep it as lag that `draftflow status` warns of
// after a finished run (on a broker that outlives the run).
func waitCommitted(ctx context.Context, admin *kafka.Admin, group string, ends map[int]int64, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		committed, err := admin.CommittedOffsets(ctx, group, topics.TopicShardFiles)
		if err == nil && !slices.ContainsFunc(slices.Collect(maps.Keys(ends)), func(p int) bool { return committed[p] < ends[p] }) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
