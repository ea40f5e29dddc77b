package status

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// Report is what `draftflow status` shows, and its JSON document (`--json`).
type Report struct {
	// Time the report was taken.
	Time time.Time `json:"time"`
	// Namespace of the pipeline's topics and groups ("" for none).
	Namespace string `json:"namespace,omitempty"`
	// Stages in pipeline order: every configured stage's group, then groups only status records named.
	Stages []StageReport `json:"stages"`
	// Rejections on the rejected topic, by stage and reason class, most first; RejectedTotal is their sum.
	Rejections    []RejectionCount `json:"rejections"`
	RejectedTotal int64            `json:"rejected_total"`
	// Warnings are things an operator should look at, in words.
	Warnings []string `json:"warnings"`
}

// StageReport is one stage's consumer group on its input topic, and what its processes published.
type StageReport struct {
	// Stage, Group and Topic name the stage, its consumer group and its input topic (logical names; no group
	// and topic for ingest).
	Stage string `json:"stage"`
	Group string `json:"group,omitempty"`
	Topic string `json:"topic,omitempty"`
	// GroupState is the coordinator's state of the group (Stable, PreparingRebalance, Empty, Dead, ...).
	GroupState string `json:"group_state,omitempty"`
	// Members of the group now, with their client ids, hosts and partitions.
	Members []kafka.GroupMember `json:"members"`
	// Partitions of the input topic: committed and end offsets and lag; Committed, End and Lag are their sums.
	Partitions []PartitionReport `json:"partitions"`
	Committed  int64             `json:"committed"`
	End        int64             `json:"end"`
	Lag        int64             `json:"lag"`
	// RecordsPerSecond and TokensPerSecond are the stage's rates, summed over its running instances; RateSource
	// says where they come from: "window" (differences of the status records' counters over the last
	// RateWindowSeconds: the records status read before, under --watch, and those still on the status topic),
	// "published" (one record per instance: the rates the processes published), "offsets" (no status records:
	// the committed offsets' progress over status's own reads, records/s only), "" (nothing to go by yet).
	RecordsPerSecond  float64 `json:"records_per_s"`
	TokensPerSecond   float64 `json:"tokens_per_s"`
	RateSource        string  `json:"rate_source,omitempty"`
	RateWindowSeconds float64 `json:"rate_window_s,omitempty"`
	// ETASeconds is Lag / RecordsPerSecond: 0 when nothing is left, null when records are left and none move.
	ETASeconds *float64 `json:"eta_s"`
	// Records, Rejected and Tokens are the stage's counters summed over its instances' latest records (since
	// each process started).
	Records  int64 `json:"records"`
	Rejected int64 `json:"rejected"`
	Tokens   int64 `json:"tokens"`
	// Instances are the stage's processes that published a status recently.
	Instances []InstanceReport `json:"instances"`
	// Endpoints are the generate stage's SGLang endpoints, per instance.
	Endpoints []EndpointReport `json:"endpoints,omitempty"`
}

// PartitionReport is one partition of a stage's input topic.
type PartitionReport struct {
	// Partition is the partition number; Committed the group's next offset to read there (its start offset when
	// it committed nothing), End the offset the next record will get, Lag = End - Committed.
	Partition int   `json:"partition"`
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

// InstanceReport is one stage process's latest status record.
type InstanceReport struct {
	// Instance, Host and State are those of the latest record; LastSeen its time.
	Instance string    `json:"instance"`
	Host     string    `json:"host,omitempty"`
	State    string    `json:"state"`
	LastSeen time.Time `json:"last_seen"`
	// AgeSeconds is how old LastSeen was when the report was taken.
	AgeSeconds float64 `json:"age_s"`
	// Records, Rejected and Tokens are the process's counters; the rates are over the window of its records
	// (0 once it stopped).
	Records          int64   `json:"records"`
	Rejected         int64   `json:"rejected"`
	Tokens           int64   `json:"tokens"`
	RecordsPerSecond float64 `json:"records_per_s"`
	TokensPerSecond  float64 `json:"tokens_per_s"`
	// Stalled is why the process makes no progress, as its latest record says ("" when it does).
	Stalled string `json:"stalled,omitempty"`
}

// EndpointReport is one SGLang endpoint as one generate instance last published it.
type EndpointReport struct {
	// Instance is the generate process that published it.
	Instance string `json:"instance"`
	topics.EndpointStatus
}

// RejectionCount counts the dead letters of one stage and reason class.
type RejectionCount struct {
	// Stage is the stage that rejected the records.
	Stage string `json:"stage"`
	// Reason is the rejection's class (topics.Rejection.Class), or for records without one its reason cut at
	// the first colon with numbers written N.
	Reason string `json:"reason"`
	// Count is how many records the rejected topic holds for this stage and reason.
	Count int64 `json:"count"`
	// Example is the full reason of the latest of them.
	Example string `json:"example"`
}

// CollectorConfig configures a Collector; zero values are documented defaults.
type CollectorConfig struct {
	// Client is the process's client of the cluster the pipeline is on (its Namespace included); required.
	Client *kafka.Client
	// Stages are the groups always shown, Optional ones once they have an input topic or a process (a group
	// a status record names is added).
	Stages []Stage
	// Window is how far back rates look (default 60 s).
	Window time.Duration
	// StatusTail is how many of the latest records of each status-topic partition a read looks at (default 512).
	StatusTail int
	// Forget drops an instance whose latest record is older than this (default 15 min).
	Forget time.Duration
}

// Collector builds Reports. It keeps what it read before (the rejected topic's position and counts, the
// status records, the committed offsets of earlier reads), so calling Collect again under `--watch` reads only
// what is new and computes rates over its window. Not safe for concurrent use.
type Collector struct {
	cfg CollectorConfig
	cl  *kafka.Client // cfg.Client

	rejNext  map[int]int64 // rejected topic: partition -> next offset to read
	rejected map[[2]string]*RejectionCount
	statNext map[int]int64              // status topic: partition -> next offset to read
	statuses map[string][]topics.Status // key -> records within the window, oldest first
	reads    map[string][]committedAt   // group -> committed sums of earlier reads within the window
	now      func() time.Time
}

type committedAt struct {
	at        time.Time
	committed int64
}

// NewCollector returns a Collector.
func NewCollector(cfg CollectorConfig) *Collector {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.StatusTail <= 0 {
		cfg.StatusTail = 512
	}
	if cfg.Forget <= 0 {
		cfg.Forget = 15 * time.Minute
	}
	return &Collector{cfg: cfg, cl: cfg.Client, rejNext: map[int]int64{}, rejected: map[[2]string]*RejectionCount{},
		statNext: map[int]int64{}, statuses: map[string][]topics.Status{}, reads: map[string][]committedAt{}, now: time.Now}
}

// Collect reads the pipeline's state from Kafka and returns a Report. A part that cannot be read (a topic
// not created yet) becomes a warning; only an unreachable cluster is an error.
func (c *Collector) Collect(ctx context.Context) (*Report, error) {
	if c.cl == nil {
		return nil, errors.New("status: no Kafka client")
	}
	kc := c.cl.Config()
	now := c.now()
	r := &Report{Time: now.UTC(), Namespace: kc.Namespace, Stages: []StageReport{}, Rejections: []RejectionCount{}, Warnings: []string{}}
	if _, err := c.cl.Admin().Groups(ctx); err != nil {
		return nil, err
	}
	if err := c.readStatuses(ctx, now); err != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("status topic %q not read (%v): no per-process figures", kc.Topic(topics.TopicStatus), err))
	}
	if err := c.readRejections(ctx); err != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("rejected topic %q not read: %v", kc.Topic(topics.TopicRejected), err))
	}
	for _, st := range c.stages() {
		sr, warn := c.stage(ctx, st, now)
		if st.Optional && len(sr.Instances) == 0 && len(sr.Partitions) == 0 {
			continue // a stage this pipeline does not run: no input topic, no process
		}
		r.Stages = append(r.Stages, sr)
		r.Warnings = append(r.Warnings, warn...)
	}
	for _, rc := range c.rejected {
		r.Rejections = append(r.Rejections, *rc)
		r.RejectedTotal += rc.Count
	}
	sort.Slice(r.Rejections, func(i, j int) bool {
		a, b := r.Rejections[i], r.Rejections[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Stage+"\x00"+a.Reason < b.Stage+"\x00"+b.Reason
	})
	r.Warnings = append(r.Warnings, retentionWarnings(ctx, kc, c.cl.Admin(), r)...)
	return r, nil
}

// retentionWarnings says where retention may cost a stage records: records of its input topic deleted before
// its group read them, or unread records older than 80% of the topic's retention.ms (kafka.RetentionRisk). A
// consumer whose committed offset fell off the log jumps to the first offset still there, so without this
// warning the loss would be silent.
func retentionWarnings(ctx context.Context, kc kafka.Config, admin *kafka.Admin, r *Report) []string {
	var out []string
	for _, st := range r.Stages {
		if st.Group == "" || st.Topic == "" {
			continue
		}
		risk, err := admin.RetentionRisk(ctx, st.Group, st.Topic)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: retention of %s not checked: %v", st.Stage, kc.Topic(st.Topic), err))
			continue
		}
		out = append(out, risk.Warnings(r.Time)...)
	}
	return out
}

// stages returns the configured stages, then any group that a status record names and they do not, then
// stages without a group (ingest) that published, ingest first.
func (c *Collector) stages() []Stage {
	out := append([]Stage(nil), c.cfg.Stages...)
	seen := map[string]bool{}
	for _, st := range out {
		seen[st.Name+"\x00"+st.Group] = true
	}
	var extra []Stage
	for _, recs := range c.statuses {
		s := recs[len(recs)-1]
		if k := s.Stage + "\x00" + s.Group; !seen[k] {
			seen[k] = true
			extra = append(extra, Stage{Name: s.Stage, Group: s.Group, Topic: s.Topic})
		}
	}
	sort.Slice(extra, func(i, j int) bool {
		a, b := extra[i], extra[j]
		if (a.Group == "") != (b.Group == "") {
			return a.Group == "" // ingest (no group) comes first: it is the start of the pipeline
		}
		return a.Name+"\x00"+a.Group < b.Name+"\x00"+b.Group
	})
	var lead []Stage
	for len(extra) > 0 && extra[0].Group == "" {
		lead, extra = append(lead, extra[0]), extra[1:]
	}
	return append(append(lead, out...), extra...)
}

// stage reports one stage's group, with the warnings it gives rise to.
func (c *Collector) stage(ctx context.Context, st Stage, now time.Time) (StageReport, []string) {
	kc := c.cl.Config()
	sr := StageReport{Stage: st.Name, Group: st.Group, Topic: st.Topic, Members: []kafka.GroupMember{},
		Partitions: []PartitionReport{}, Instances: []InstanceReport{}}
	var warn []string
	c.instances(&sr, st, now)
	if st.Group == "" || st.Topic == "" {
		return sr, warn
	}
	if desc, err := c.cl.Admin().DescribeGroup(ctx, st.Group); err != nil {
		warn = append(warn, fmt.Sprintf("%s: group %s not described: %v", st.Name, kc.Topic(st.Group), err))
	} else {
		sr.GroupState, sr.Members = desc.State, desc.Members
		if sr.Members == nil {
			sr.Members = []kafka.GroupMember{}
		}
	}
	ends, err := c.cl.Admin().EndOffsets(ctx, st.Topic)
	if err != nil {
		return sr, append(warn, fmt.Sprintf("%s: topic %s not read: %v", st.Name, kc.Topic(st.Topic), err))
	}
	starts, err := c.cl.Admin().StartOffsets(ctx, st.Topic)
	if err != nil {
		return sr, append(warn, fmt.Sprintf("%s: topic %s not read: %v", st.Name, kc.Topic(st.Topic), err))
	}
	committed, err := c.cl.Admin().CommittedOffsets(ctx, st.Group, st.Topic)
	if err != nil {
		return sr, append(warn, fmt.Sprintf("%s: committed offsets of %s not read: %v", st.Name, kc.Topic(st.Group), err))
	}
	for p := 0; p < len(ends); p++ {
		cm, ok := committed[p]
		if !ok || cm < starts[p] {
			cm = starts[p] // nothing committed (or committed before what retention kept): the group starts there
		}
		pr := PartitionReport{Partition: p, Committed: cm, End: ends[p], Lag: max(0, ends[p]-cm)}
		sr.Partitions = append(sr.Partitions, pr)
		sr.Committed += pr.Committed
		sr.End += pr.End
		sr.Lag += pr.Lag
	}

	// Records/s: the instances' rates (instances) when they publish; else the committed offsets' progress
	// over status's own reads, once it has read twice. (Committed offsets move in steps: generate commits the
	// contiguous prefix of out-of-order completions, the sink only after a flush.)
	reads := append(c.reads[st.Group], committedAt{at: now, committed: sr.Committed})
	for len(reads) > 2 && now.Sub(reads[1].at) >= c.cfg.Window {
		reads = reads[1:]
	}
	c.reads[st.Group] = reads
	if dt := now.Sub(reads[0].at).Seconds(); sr.RateSource == "" && dt >= 1 && reads[0].committed <= sr.Committed {
		sr.RecordsPerSecond = float64(sr.Committed-reads[0].committed) / dt
		sr.RateSource, sr.RateWindowSeconds = "offsets", dt
	}
	switch {
	case sr.Lag == 0:
		zero := 0.0
		sr.ETASeconds = &zero
	case sr.RecordsPerSecond > 0:
		eta := float64(sr.Lag) / sr.RecordsPerSecond
		sr.ETASeconds = &eta
	}

	running := 0
	for _, in := range sr.Instances {
		if in.State == topics.StatusRunning {
			running++
		}
	}
	switch {
	case sr.Lag > 0 && len(sr.Members) == 0:
		warn = append(warn, fmt.Sprintf("%s: %d records wait on %s and group %s has no members", st.Name, sr.Lag,
			kc.Topic(st.Topic), kc.Topic(st.Group)))
	case sr.Lag > 0 && sr.ETASeconds == nil && sr.RateSource != "" && sr.RateWindowSeconds >= 0.9*c.cfg.Window.Seconds():
		warn = append(warn, fmt.Sprintf("%s: %d records wait on %s and none moved in the last %s", st.Name, sr.Lag,
			kc.Topic(st.Topic), time.Duration(sr.RateWindowSeconds*float64(time.Second)).Round(time.Second)))
	}
	if len(sr.Members) > 0 && sr.GroupState != "" && sr.GroupState != "Stable" {
		warn = append(warn, fmt.Sprintf("%s: group %s is %s (a rebalance: consumption paused)", st.Name, kc.Topic(st.Group), sr.GroupState))
	}
	if len(sr.Members) > running && len(c.statuses) > 0 {
		warn = append(warn, fmt.Sprintf("%s: %d group members but %d processes publishing status (started without status, or an old build?)",
			st.Name, len(sr.Members), running))
	}
	for _, in := range sr.Instances {
		if in.State == topics.StatusRunning && in.Stalled != "" {
			warn = append(warn, fmt.Sprintf("%s: instance %s makes no progress: %s", st.Name, in.Instance, in.Stalled))
		}
		if in.State == topics.StatusRunning && in.AgeSeconds > 3*c.interval(st.Name, in.Instance) {
			warn = append(warn, fmt.Sprintf("%s: instance %s last reported %s ago (stopped without a last word, or cannot reach Kafka)",
				st.Name, in.Instance, time.Duration(in.AgeSeconds*float64(time.Second)).Round(time.Second)))
		}
	}
	for _, e := range sr.Endpoints {
		if !e.Up {
			warn = append(warn, fmt.Sprintf("%s: endpoint %s is down (seen by %s)", st.Name, e.Name, e.Instance))
		}
	}
	return sr, warn
}

func (c *Collector) interval(stage, instance string) float64 {
	recs := c.statuses[topics.StatusKey(stage, instance)]
	if len(recs) == 0 || recs[len(recs)-1].IntervalSeconds <= 0 {
		return DefaultInterval.Seconds()
	}
	return recs[len(recs)-1].IntervalSeconds
}

// instances fills sr's instances, counters, token rate and endpoints from the status records of st.
func (c *Collector) instances(sr *StageReport, st Stage, now time.Time) {
	var keys []string
	for k, recs := range c.statuses {
		last := recs[len(recs)-1]
		if last.Stage == st.Name && (st.Group == "" || last.Group == st.Group) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var recRate, tokRate, window float64
	windowed := false
	for _, k := range keys {
		recs := c.statuses[k]
		last := recs[len(recs)-1]
		in := InstanceReport{Instance: last.Instance, Host: last.Host, State: last.State, LastSeen: last.Time,
			AgeSeconds: max(0, now.Sub(last.Time).Seconds()), Records: last.Records, Rejected: last.Rejected, Tokens: last.Tokens,
			RecordsPerSecond: last.RecordsPerSecond, TokensPerSecond: last.TokensPerSecond, Stalled: last.Stalled}
		// The instance's own rates over the window, from its first and last record in it.
		first := recs[0]
		if dt := last.Time.Sub(first.Time).Seconds(); dt > 0 && last.Records >= first.Records {
			in.RecordsPerSecond = float64(last.Records-first.Records) / dt
			in.TokensPerSecond = float64(last.Tokens-first.Tokens) / dt
			windowed = true
			window = max(window, dt)
		}
		if last.State == topics.StatusStopped {
			in.RecordsPerSecond, in.TokensPerSecond = 0, 0
		}
		sr.Instances = append(sr.Instances, in)
		sr.Records += last.Records
		sr.Rejected += last.Rejected
		sr.Tokens += last.Tokens
		recRate += in.RecordsPerSecond
		tokRate += in.TokensPerSecond
		for _, e := range last.Endpoints {
			if last.State == topics.StatusStopped {
				e.OutputTokensPerSecond = 0
			} else if at, before, ok := firstOutput(recs, e.Name); ok && last.Time.Sub(at) > 0 {
				e.OutputTokensPerSecond = float64(e.OutputTokens-before) / last.Time.Sub(at).Seconds()
			}
			sr.Endpoints = append(sr.Endpoints, EndpointReport{Instance: last.Instance, EndpointStatus: e})
		}
	}
	sr.RecordsPerSecond, sr.TokensPerSecond = recRate, tokRate
	if len(keys) > 0 {
		sr.RateSource = "published"
		if windowed {
			sr.RateSource, sr.RateWindowSeconds = "window", window
		}
	}
}

// firstOutput returns the time and output-token count of the first of recs (one instance's, oldest first) that
// lists endpoint name.
func firstOutput(recs []topics.Status, name string) (time.Time, int64, bool) {
	for _, r := range recs {
		for _, e := range r.Endpoints {
			if e.Name == name {
				return r.Time, e.OutputTokens, true
			}
		}
	}
	return time.Time{}, 0, false
}

// readStatuses reads what is new on the status topic (at first, the last StatusTail records of each partition)
// and keeps, per key, the records within the window (and always the latest).
func (c *Collector) readStatuses(ctx context.Context, now time.Time) error {
	ends, err := c.cl.Admin().EndOffsets(ctx, topics.TopicStatus)
	if err != nil {
		return err
	}
	starts, err := c.cl.Admin().StartOffsets(ctx, topics.TopicStatus)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	err = c.readAll(ctx, topics.TopicStatus, starts, ends, c.statNext, int64(c.cfg.StatusTail), func(m kafka.Message) {
		var s topics.Status
		if topics.Unmarshal(m.Value, &s) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		k := topics.StatusKey(s.Stage, s.Instance)
		recs := c.statuses[k]
		if n := len(recs); n > 0 && !s.Time.After(recs[n-1].Time) {
			return
		}
		c.statuses[k] = append(recs, s)
	})
	for k, recs := range c.statuses {
		last := recs[len(recs)-1]
		if now.Sub(last.Time) > c.cfg.Forget {
			delete(c.statuses, k)
			continue
		}
		i := 0
		for i < len(recs)-1 && last.Time.Sub(recs[i].Time) > c.cfg.Window {
			i++
		}
		// Counters start again when a process restarts under the same instance name: keep only the last run.
		for j := len(recs) - 1; j > i; j-- {
			if !recs[j].Started.Equal(recs[j-1].Started) {
				i = j
				break
			}
		}
		c.statuses[k] = recs[i:]
	}
	return err
}

// readRejections counts what is new on the rejected topic.
func (c *Collector) readRejections(ctx context.Context) error {
	ends, err := c.cl.Admin().EndOffsets(ctx, topics.TopicRejected)
	if err != nil {
		return err
	}
	starts, err := c.cl.Admin().StartOffsets(ctx, topics.TopicRejected)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	return c.readAll(ctx, topics.TopicRejected, starts, ends, c.rejNext, 0, func(m kafka.Message) {
		var rej topics.Rejection
		if topics.Unmarshal(m.Value, &rej) != nil {
			rej = topics.Rejection{Stage: "?", Class: "undecodable dead letter"}
		}
		class := ReasonClass(&rej)
		mu.Lock()
		defer mu.Unlock()
		k := [2]string{rej.Stage, class}
		rc := c.rejected[k]
		if rc == nil {
			rc = &RejectionCount{Stage: rej.Stage, Reason: class}
			c.rejected[k] = rc
		}
		rc.Count++
		rc.Example = rej.Reason
	})
}

// readAll reads every partition of topic from its next offset (at first: its start, or tail records before its
// end when tail > 0) to its end, concurrently, and advances next.
func (c *Collector) readAll(ctx context.Context, topic string, starts, ends, next map[int]int64, tail int64, fn func(kafka.Message)) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for p, end := range ends {
		from, ok := next[p]
		if !ok {
			from = starts[p]
			if tail > 0 {
				from = max(from, end-tail)
			}
		}
		if from < starts[p] {
			from = starts[p]
		}
		if from >= end {
			mu.Lock()
			next[p] = max(from, end)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(p int, from, end int64) {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := c.cl.ReadPartition(rctx, topic, p, from, end, func(m kafka.Message) error { fn(m); return nil })
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			next[p] = end
		}(p, from, end)
	}
	wg.Wait()
	return errors.Join(errs...)
}

var digits = regexp.MustCompile(`[0-9]+`)

// ReasonClass is what status counts a rejection by: its Class, or, for a record without one, its reason cut
// at the first colon, numbers written N, at most 60 bytes.
func ReasonClass(r *topics.Rejection) string {
	if r.Class != "" {
		return r.Class
	}
	s := r.Reason
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	s = digits.ReplaceAllString(strings.TrimSpace(s), "N")
	if len(s) > 60 {
		s = s[:60]
	}
	if s == "" {
		s = "unknown"
	}
	return s
}
