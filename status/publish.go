package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// Stage names a stage of the pipeline as status sees it: its name, the consumer group its replicas share and
// the (logical) topic that group consumes. Ingest has no group.
type Stage struct {
	// Name is ingest, tokenize, generate, sink or capture.
	Name string `json:"stage"`
	// Group is the consumer group (logical name), Topic the topic it consumes (logical name).
	Group string `json:"group,omitempty"`
	Topic string `json:"topic,omitempty"`
	// Optional marks a stage a pipeline may run without (capture): a Collector shows it only once its input
	// topic exists or a process published a status record for it, so a pipeline without it gets no row and no
	// warning about its missing topic.
	Optional bool `json:"-"`
	// Stalled, when set, says why the stage makes no progress ("" when it does): the running records carry it.
	Stalled func() string `json:"-"`
}

// PublisherConfig configures Publish; zero values are documented defaults.
type PublisherConfig struct {
	// Client is the process's client of the cluster the status topic is on; required. Publish does not close it.
	Client *kafka.Client
	// Gatherer is the process's registry, the one its stages register their metrics on.
	Gatherer prometheus.Gatherer
	// Stages are the stages this process runs (one record each per interval).
	Stages []Stage
	// Instance names this process (default "<host>-<pid>").
	Instance string
	// Interval between records (default 5 s).
	Interval time.Duration
	// Window over which the published rates are computed (default 60 s).
	Window time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Defaults of PublisherConfig.
const (
	DefaultInterval = 5 * time.Second
	DefaultWindow   = 60 * time.Second
)

// DefaultInstance is "<host>-<pid>": unique among the processes of a pipeline.
func DefaultInstance() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// sample is one reading of a stage's cumulative counters.
type sample struct {
	at             time.Time
	records, token int64
	endpoint       map[string]int64 // output tokens per endpoint
}

// Publish writes a topics.Status for each of cfg.Stages to topics.TopicStatus at once and then every
// Interval, until ctx ends; then it writes a last one in state stopped (waiting up to 5 s for it) and returns.
// Call it after the stages' metrics exist and stop it after the stages returned, so the last record holds
// their final figures. A failed write is logged and the next interval tries again: status is never a reason
// for a stage to stop. It returns an error only when it has no client or its producer fails to close.
func Publish(ctx context.Context, cfg PublisherConfig) (err error) {
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	host, _ := os.Hostname()
	if cfg.Client == nil {
		return errors.New("status: no Kafka client")
	}
	p := cfg.Client.NewProducer(topics.TopicStatus, kafka.ProducerConfig{})
	defer func() {
		if cerr := p.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("status: close producer: %w", cerr)
		}
	}()
	started := time.Now()
	history := map[string][]sample{}
	publish := func(ctx context.Context, state string, wait bool) {
		fams, err := gather(cfg.Gatherer)
		if err != nil {
			log.Debug("status: gathering metrics", "err", err)
		}
		now := time.Now()
		for _, st := range cfg.Stages {
			s := &topics.Status{Stage: st.Name, Instance: cfg.Instance, Host: host, Group: st.Group, Topic: st.Topic,
				State: state, Time: now.UTC(), Started: started.UTC(), IntervalSeconds: cfg.Interval.Seconds()}
			fams.figures(s)
			if st.Stalled != nil && state == topics.StatusRunning {
				s.Stalled = st.Stalled()
			}
			history[st.Name] = rates(s, history[st.Name], cfg.Window)
			key := topics.StatusKey(st.Name, cfg.Instance)
			value, err := topics.Marshal(s)
			if err != nil {
				log.Warn("status: record not written", "stage", st.Name, "err", err)
				continue
			}
			if wait {
				if err := p.SendSync(ctx, key, value); err != nil {
					log.Warn("status: last record not written", "stage", st.Name, "err", err)
				}
				continue
			}
			// A running record is not tied to ctx: ending ctx (shutdown) must not fail the records already
			// handed to the producer, which Close flushes.
			if err := p.Send(context.WithoutCancel(ctx), key, value, func(err error) {
				if err != nil {
					log.Warn("status: record not written", "stage", st.Name, "err", err)
				}
			}); err != nil {
				log.Warn("status: record not written", "stage", st.Name, "err", err)
			}
		}
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		publish(ctx, topics.StatusRunning, false)
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			publish(last, topics.StatusStopped, true)
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// rates sets s's rates from the samples of its stage within window (s's own counters included) and returns
// the samples to keep.
func rates(s *topics.Status, hist []sample, window time.Duration) []sample {
	now := sample{at: s.Time, records: s.Records, token: s.Tokens, endpoint: map[string]int64{}}
	for _, e := range s.Endpoints {
		now.endpoint[e.Name] = e.OutputTokens
	}
	hist = append(hist, now)
	for len(hist) > 2 && now.at.Sub(hist[1].at) >= window {
		hist = hist[1:]
	}
	first := hist[0]
	dt := now.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return hist
	}
	s.RateWindowSeconds = dt
	s.RecordsPerSecond = float64(now.records-first.records) / dt
	s.TokensPerSecond = float64(now.token-first.token) / dt
	for i := range s.Endpoints {
		// An endpoint not in the first sample came up since: its counter started at 0.
		s.Endpoints[i].OutputTokensPerSecond = float64(s.Endpoints[i].OutputTokens-first.endpoint[s.Endpoints[i].Name]) / dt
	}
	return hist
}

// Start runs Publish on a goroutine of its own and returns the function that stops it: stop ends the
// publishing (the last record, in state stopped, is written then), waits for the goroutine and logs why
// publishing failed, if it did. ctx ending does not stop it (its values are kept): call stop once the stages
// have returned, so the last record holds their final figures.
func Start(ctx context.Context, cfg PublisherConfig) (stop func()) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Publish(pctx, cfg); err != nil {
			cmp.Or(cfg.Logger, slog.Default()).Warn("status: publishing stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}
