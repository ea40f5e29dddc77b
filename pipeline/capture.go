package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/capture/plan"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// Capture is the capture part of a run: the stage's settings, with "sim" as both servers' URL for in-process
// simulated capture servers. The run sets the stage's Client, Logger and Dir.
type Capture struct {
	Stage capturestage.Config
	// NumLayers is the target model's decoder layers, for the default aux layers when Stage.AuxLayers is empty
	// (0: from the model directory's config.json).
	NumLayers int
	// SimHidden is the hidden size of simulated capture servers (default sim.DefaultHiddenSize).
	SimHidden int
}

// Enabled reports whether the run captures.
func (c Capture) Enabled() bool { return c.Stage.Aux != "" || c.Stage.Final != "" }

// capture is the capture part of one run: its settings resolved, its simulated servers.
type capture struct {
	cfg    capturestage.Config
	hidden int // the features' hidden size, 0 when unknown before the first answer
	stops  []func()
}

// startCapture checks c's settings, starts simulated capture servers for "sim" (shaped after model, context
// window ctxLen) and resolves the aux layers; stop stops the servers.
func startCapture(c Capture, model *tokenize.Model, modelDir string, ctxLen int, log *slog.Logger) (*capture, error) {
	cp := &capture{cfg: c.Stage}
	if cp.cfg.Aux == "" || cp.cfg.Final == "" {
		return nil, errors.New("capture needs both --capture-aux and --capture-final (URLs, or sim for both)")
	}
	if (cp.cfg.Aux == "sim") != (cp.cfg.Final == "sim") {
		return nil, errors.New("--capture-aux sim needs --capture-final sim: a simulated server's features only pair with another's")
	}
	shape, err := plan.ReadModel(modelDir)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	cp.hidden = shape.Hidden
	if cp.cfg.Aux == "sim" {
		cp.hidden = cmp.Or(c.SimHidden, sim.DefaultHiddenSize)
		if len(cp.cfg.AuxLayers) == 0 {
			cp.cfg.AuxLayers = []int{2, 4, 5}
		}
		for i, mode := range []string{sim.HiddenAux, sim.HiddenFinal} {
			scfg := sim.Config{Instant: true, HiddenStates: mode, HiddenSize: cp.hidden, AuxLayers: cp.cfg.AuxLayers, DisableRadixCache: true}
			url, stop, err := StartSim(scfg, model, ctxLen, log)
			if err != nil {
				cp.stop()
				return nil, err
			}
			cp.stops = append(cp.stops, stop)
			if i == 0 {
				cp.cfg.Aux = url
			} else {
				cp.cfg.Final = url
			}
		}
	}
	if cp.cfg.AuxLayers, err = plan.AuxLayers(cp.cfg.AuxLayers, cmp.Or(c.NumLayers, shape.Layers)); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

// stop stops the simulated capture servers.
func (cp *capture) stop() {
	for _, s := range cp.stops {
		s()
	}
	cp.stops = nil
}

// estimate prints what the run's capture will write, from the inputs' size (about 4 bytes of text a token, and
// outputs as long as the replies they replace).
func (cp *capture) estimate(w io.Writer, inputs []string, dir string) error {
	var n int64
	for _, in := range inputs {
		if st, err := os.Stat(in); err == nil {
			n += st.Size()
		}
	}
	return plan.Estimate{AuxLayers: len(cp.cfg.AuxLayers), Hidden: cp.hidden, Tokens: n / 4, Dir: dir,
		TokensWhat: fmt.Sprintf("tokens expected (the inputs' %s at ~4 bytes of text a token)", plan.HumanBytes(float64(n)))}.Write(w)
}

// finish captures every shard of dir that has no complete feature file yet, once the pipeline's stages have
// stopped (the sink's final flush is committed): it announces every shard again and runs the stage (base)
// until each has its file and the stage's group has committed every announcement (waitCommitted). Shards the
// stage already did during the run are skipped.
func finish(ctx context.Context, kcl *kafka.Client, dir string, base capturestage.Config) error {
	n, err := sink.AnnounceShards(ctx, kcl, dir)
	if err != nil {
		return err
	}
	ends, err := kcl.Admin().EndOffsets(ctx, topics.TopicShardFiles)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	runs, err := shard.RunDirs(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
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
	if len(want) == 0 {
		return nil
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var stopping sync.Once
	var waiter sync.WaitGroup
	defer waiter.Wait() // after cancel: the wait for the commits ends with cctx
	cfg := base
	cfg.OnShard = func(path string) {
		mu.Lock()
		delete(want, path)
		left := len(want)
		mu.Unlock()
		if left == 0 {
			stopping.Do(func() {
				waiter.Go(func() {
					waitCommitted(cctx, kcl.Admin(), cmp.Or(cfg.Group, capturestage.DefaultGroup), ends, 10*time.Second)
					cancel()
				})
			})
		}
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
