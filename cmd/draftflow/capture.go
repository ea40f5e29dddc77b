package main

import (
	"cmp"
	"context"
	"errors"
	"flag"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/pipeline"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/capture/plan"
)

// registerCaptureModelFlags binds the capture settings beside capturestage.Config's: where the layers and the
// hidden size come from when the servers cannot say.
func registerCaptureModelFlags(fs *flag.FlagSet, numLayers *int, modelDir *string) {
	fs.IntVar(numLayers, "num-layers", *numLayers, "the target model's decoder layers, for the default --aux-layers 2,L/2,L-3 (default: from --model's config.json)")
	fs.StringVar(modelDir, "model", *modelDir, "the target model's directory (its config.json gives the layer count and the hidden size)")
}

// captureFlags is the `draftflow capture` settings: the shared ones, the stage's, where the model's layers
// come from, and --out, the sink's output directory (a key of the sink: sink.out).
func captureFlags(c *common, cfg *capturestage.Config, numLayers *int, modelDir *string) *cli.Table {
	t := cli.New("capture")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, ":9090") })
	cfg.Dir = cmp.Or(cfg.Dir, "out/run")
	t.Add("sink", func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.Dir, "out", cfg.Dir, "the sink's output directory: the feature files go beside its shards")
	})
	t.Add(capturestage.Stage, cfg.RegisterFlags)
	t.Add(capturestage.Stage, func(fs *flag.FlagSet) { registerCaptureModelFlags(fs, numLayers, modelDir) })
	t.Check(func() error {
		if cfg.Aux == "" || cfg.Final == "" {
			return errors.New("capture needs both servers: --sglang-aux URL and --sglang-final URL (docs/hidden-states.md says how to start them)")
		}
		return nil
	})
	return t
}

// cmdCapture is `draftflow capture`: the capture stage on its own.
func cmdCapture(ctx context.Context, args []string) error {
	var c common
	var cfg capturestage.Config
	var numLayers int
	var modelDir string
	p, err := prepare(ctx, &c, captureFlags(&c, &cfg, &numLayers, &modelDir), args, capturestage.Stage)
	if err != nil {
		return err
	}
	defer p.close()
	model, err := plan.ReadModel(modelDir)
	if err != nil {
		return err
	}
	if cfg.AuxLayers, err = plan.AuxLayers(cfg.AuxLayers, cmp.Or(numLayers, model.Layers)); err != nil {
		return err
	}
	pending, err := plan.PendingTokens(cfg.Dir)
	if err != nil {
		return err
	}
	defer p.publishStatus(ctx, pipeline.StatusStage(capturestage.Stage, cfg.Group))()
	cfg.Client, cfg.Logger, cfg.Registerer, cfg.Ready = p.kcl, p.log, p.reg, p.ready
	cfg.Progress = stderr()
	est := plan.Estimate{AuxLayers: len(cfg.AuxLayers), Hidden: model.Hidden, Tokens: pending, TokensWhat: "tokens in the shards without a feature file", Dir: cfg.Dir}
	if err := est.Write(stderr()); err != nil {
		return err
	}
	return capturestage.Run(ctx, cfg)
}
