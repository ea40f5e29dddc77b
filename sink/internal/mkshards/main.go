// Command mkshards writes sample shards through the real sink, for tests of the readers (the Python package
// and its pytest suite): it starts an embedded broker, produces deterministic generations for two runs (two
// sampling temperatures) to the generated topic, some of them rows brought in with their output (every origin),
// runs sink.Run until every row is durable, and writes the expected rows as JSON lines.
//
//	go run ./sink/internal/mkshards -out DIR -expected FILE [-n 200] [-rotate-rows 37] [-row-group-rows 16]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/topics"
)

// expectedRow is one line of the -expected file.
type expectedRow struct {
	RunDir        string   `json:"run_dir"`
	ID            string   `json:"id"`
	InputIDs      []uint32 `json:"input_ids"`
	LossMask      []int    `json:"loss_mask"`
	PromptLen     int      `json:"prompt_len"`
	CompletionLen int      `json:"completion_len"`
	Dataset       string   `json:"dataset"`
	FinishReason  string   `json:"finish_reason"`
	Origin        string   `json:"origin"`
}

func main() {
	out := flag.String("out", "", "sink output directory (required)")
	expected := flag.String("expected", "", "write the expected rows here as JSON lines (required)")
	n := flag.Int("n", 200, "conversations per run")
	rotate := flag.Int("rotate-rows", 37, "sink RotateRows")
	rowGroup := flag.Int("row-group-rows", 16, "sink RowGroupRows")
	flag.Parse()
	if *out == "" || *expected == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *expected, *n, *rotate, *rowGroup); err != nil {
		fmt.Fprintln(os.Stderr, "mkshards:", err)
		os.Exit(1)
	}
}

func gen(i int, temp float64) *topics.Generation {
	r := rand.New(rand.NewPCG(uint64(i), uint64(temp*1000)))
	prompt := make([]uint32, 1+r.IntN(300))
	for j := range prompt {
		prompt[j] = r.Uint32N(151000)
	}
	output := make([]uint32, 1+r.IntN(200))
	for j := range output {
		output[j] = r.Uint32N(151000)
	}
	fr := "stop"
	if i%4 == 0 {
		fr = "length"
	}
	g := &topics.Generation{
		ID: fmt.Sprintf("sample-%05d", i), Dataset: fmt.Sprintf("set%d", i%3),
		Sampling: topics.Sampling{MaxNewTokens: 256, Temperature: &temp},
		Model:    "models/Sample-Model", TokenizerHash: "sample-tokenizer",
		Meta:      topics.GenerationMeta{FinishReason: fr, Endpoint: "http://sim"},
		PromptIDs: prompt, OutputIDs: output,
	}
	if k := i % 5; k > 0 && k < len(topics.Origins()) { // 1, 2, 3: a row brought in with its output, of each origin
		g.Origin, g.Meta.Endpoint = topics.Origins()[k], ""
	}
	return g
}

func run(out, expected string, n, rotate, rowGroup int) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := embedded.Start(embedded.Config{})
	if err != nil {
		return err
	}
	defer e.Close()
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 3, Logger: log}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kcl, err := kafka.NewClient(kc)
	if err != nil {
		return err
	}
	defer kcl.Close()
	if err := kcl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		return err
	}

	var gens []*topics.Generation
	for i := 0; i < n; i++ {
		gens = append(gens, gen(i, 0.6), gen(i, 1.0))
	}
	p := kcl.NewProducer(topics.TopicGenerated, kafka.ProducerConfig{})
	var wg sync.WaitGroup
	var sendErr error
	var sendMu sync.Mutex
	for _, g := range gens {
		value, err := topics.Marshal(g)
		if err != nil {
			return err
		}
		wg.Add(1)
		if err := p.Send(ctx, g.ID, value, func(err error) {
			if err != nil {
				sendMu.Lock()
				sendErr = err
				sendMu.Unlock()
			}
			wg.Done()
		}); err != nil {
			return err
		}
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		return err
	}
	if sendErr != nil {
		return sendErr
	}

	var mu sync.Mutex
	durable := 0
	all := make(chan struct{})
	sinkCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		_, err := sink.Run(sinkCtx, sink.Config{Client: kcl, Dir: out, RotateRows: rotate, RowGroupRows: rowGroup,
			IdleFlush: 200 * time.Millisecond, Logger: log,
			OnDurable: func(ids []string) {
				mu.Lock()
				durable += len(ids)
				if durable == len(gens) {
					close(all)
				}
				mu.Unlock()
			}})
		errc <- err
	}()
	select {
	case <-all:
	case err := <-errc:
		return fmt.Errorf("sink stopped early: %v", err)
	case <-ctx.Done():
		return fmt.Errorf("timed out with %d of %d rows durable", durable, len(gens))
	}
	stop()
	if err := <-errc; err != nil {
		return err
	}

	f, err := os.Create(expected)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, g := range gens {
		row := expectedRow{RunDir: shard.RunOf(g).DirName(), ID: g.ID, PromptLen: len(g.PromptIDs), CompletionLen: len(g.OutputIDs),
			Dataset: g.Dataset, FinishReason: g.Meta.FinishReason, Origin: topics.OriginOf(g.Origin)}
		row.InputIDs = append(append(row.InputIDs, g.PromptIDs...), g.OutputIDs...)
		row.LossMask = make([]int, len(row.InputIDs))
		for i := len(g.PromptIDs); i < len(row.LossMask); i++ {
			row.LossMask[i] = 1
		}
		if err := enc.Encode(row); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
