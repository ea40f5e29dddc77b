package pipeline

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/tokenize"
)

// simFor returns cfg shaped after model (context window ctxLen): its vocabulary, EOS ids and special tokens,
// and, where the model has the tokens, reasoning and tool-call segments as a thinking model emits them.
func simFor(cfg sim.Config, model *tokenize.Model, ctxLen int) sim.Config {
	cfg.VocabSize = model.Tokenizer.VocabSize()
	cfg.EOSTokenIDs = nil
	for _, id := range model.EOSTokenIDs {
		cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, int(id))
	}
	cfg.SpecialTokenStart = model.SpecialTokenStart
	if a, ok := model.Tokenizer.TokenID("<think>"); ok && cfg.ReasoningTokenIDs == nil {
		if b, ok := model.Tokenizer.TokenID("</think>"); ok {
			cfg.ReasoningTokenIDs = []int{int(a), int(b)}
		}
	}
	if a, ok := model.Tokenizer.TokenID("<tool_call>"); ok && cfg.ToolCallTokenIDs == nil {
		if b, ok := model.Tokenizer.TokenID("</tool_call>"); ok {
			cfg.ToolCallTokenIDs, cfg.ToolCallRate = []int{int(a), int(b)}, 0.1
		}
	}
	cfg.ContextLength = ctxLen
	return cfg
}

// StartSim serves a simulated SGLang server for model (context window ctxLen; simFor) on a free loopback port
// and returns its URL and the function that stops it: it closes the server and waits for its serving goroutine.
func StartSim(cfg sim.Config, model *tokenize.Model, ctxLen int, log *slog.Logger) (url string, stop func(), err error) {
	cfg = simFor(cfg, model, ctxLen)
	cfg.Logger = log
	s, err := sim.New(cfg)
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("simulated SGLang server stopped", "err", err)
		}
	}()
	url = "http://" + l.Addr().String()
	log.Info("simulated SGLang server", "url", url)
	return url, func() { srv.Close(); <-served; s.Close() }, nil
}
