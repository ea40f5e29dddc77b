package pipeline

import (
	"fmt"

	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/status"
	"github.com/draftflow/draftflow/topics"
)

// StatusStage returns the stage of the pipeline named ("ingest", "tokenize", "generate", "sink" or "capture") as
// status sees it, consuming as group (the stage's default group when empty). Capture is Optional: shown once the
// shard-files topic exists (a sink announces shards) or a capture process publishes, so a pipeline without
// capture has no such row. It panics on another name: the names are the pipeline's.
func StatusStage(name, group string) status.Stage {
	var st status.Stage
	switch name {
	case ingest.Stage:
		st = status.Stage{Name: name}
	case "tokenize":
		st = status.Stage{Name: name, Group: tokenize.DefaultGroup, Topic: topics.TopicPrompts}
	case "generate":
		st = status.Stage{Name: name, Group: generate.DefaultGroup, Topic: topics.TopicTokenized}
	case "sink":
		st = status.Stage{Name: name, Group: sink.DefaultGroup, Topic: topics.TopicGenerated}
	case capturestage.Stage:
		st = status.Stage{Name: name, Group: capturestage.DefaultGroup, Topic: topics.TopicShardFiles, Optional: true}
	default:
		panic(fmt.Sprintf("pipeline: no stage %q", name))
	}
	if group != "" && st.Group != "" {
		st.Group = group
	}
	return st
}

// statusStages are the stages a run of cfg runs in its process, as its status records name them: capture too
// when the run captures. The generate stage's records say why the run makes no progress (stalled).
func statusStages(cfg Config, stalled func() string) []status.Stage {
	gen := StatusStage("generate", cfg.Generate.Group)
	gen.Stalled = stalled
	stages := []status.Stage{StatusStage(ingest.Stage, ""), StatusStage("tokenize", cfg.Tokenize.Group),
		gen, StatusStage("sink", cfg.Sink.Group)}
	if cfg.Capture.Enabled() {
		stages = append(stages, StatusStage(capturestage.Stage, cfg.Capture.Stage.Group))
	}
	return stages
}
