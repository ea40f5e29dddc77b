package generate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/stages/generate/loop"
)

// driver runs the stage's admission Controller in real time: run brings every server up and watches it (one
// goroutine per server), do sends one request with retries. The benchmark (bench/generate) makes the same
// Controller calls on simulated time.
type driver struct {
	ctl    *admission.Controller
	cfg    admission.Config // the Controller's, defaults applied
	log    *slog.Logger
	aborts sync.WaitGroup // aborts of attempts on drained servers, sent beside the retry
	// loops, when set, has every request streamed and watched for a repetition loop (stopped on the server
	// when loops.stops()); nil: plain /generate.
	loops *LoopsConfig
}

// outcome is a request's Result with the repetition loop found in its reply, if any.
type outcome struct {
	*admission.Result
	loop *loop.Loop
}

func newDriver(ctl *admission.Controller, log *slog.Logger) *driver {
	return &driver{ctl: ctl, cfg: ctl.Config(), log: log}
}

// errNotStarted is do's error for a request whose startBy closed before a server took it: nothing was sent.
var errNotStarted = errors.New("generate: request not started: its record is being handed over")

// errDrained is the cause of an attempt cut short because its server was drained.
var errDrained = errors.New("generate: endpoint drained")

// abortTimeout bounds one /abort_request call.
const abortTimeout = 5 * time.Second

// unreadyWarnEvery is how often the warning about a server that is not ready repeats.
const unreadyWarnEvery = time.Minute

// run brings every server up (a health check and a capacity read) and keeps its health and, under kv-budget,
// its load and budgets current, until ctx ends or the Controller fails (see admission.Controller.Fatal); it
// returns the fatal error, or nil, once every goroutine it started is done. Requests are admitted only to
// servers run has brought up.
func (d *driver) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatalWatch := make(chan struct{})
	go func() {
		defer close(fatalWatch)
		select {
		case <-d.ctl.Fatal():
			cancel()
		case <-ctx.Done():
		}
	}()
	var servers sync.WaitGroup
	for i := range d.cfg.Endpoints {
		servers.Go(func() {
			for ctx.Err() == nil && d.bringUp(ctx, i) {
				d.watch(ctx, i)
			}
		})
	}
	servers.Wait()
	cancel()
	<-fatalWatch
	return d.ctl.Err()
}

// bringUp probes server i until it is up, waiting longer after each failure (up to HealthInterval). It
// returns false when ctx ended first or the Controller failed (a refused API key, or no server answering
// within UnreachableTimeout).
func (d *driver) bringUp(ctx context.Context, i int) bool {
	url := d.cfg.Endpoints[i]
	wait := d.cfg.RetryInitial
	since := time.Now()
	var logged time.Time
	for {
		err := d.ctl.Probe(ctx, i)
		if err == nil {
			capa := d.capacity(i)
			d.log.Info("endpoint ready", "endpoint", url, "max_total_num_tokens", capa.MaxTotalTokens,
				"dp_ranks", len(capa.Ranks), "max_running_requests", capa.MaxRunningRequests,
				"context_length", capa.ContextLength, "version", capa.Version, "policy", d.cfg.Policy)
			return true
		}
		if ctx.Err() != nil || d.ctl.Err() != nil {
			return false
		}
		// The warning repeats while the endpoint stays down, so a wrong --sglang does not pass for a slow start.
		now := time.Now()
		switch {
		case logged.IsZero():
			d.log.Warn("endpoint not ready; will keep trying", "endpoint", url, "err", err)
			logged = now
		case now.Sub(logged) >= unreadyWarnEvery:
			d.log.Warn("endpoint still not ready; will keep trying", "endpoint", url, "for", now.Sub(since).Round(time.Second), "err", err)
			logged = now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, d.cfg.HealthInterval)
	}
}

// capacity is what server i reported when it came up.
func (d *driver) capacity(i int) sglang.Capacity {
	for _, ep := range d.ctl.Endpoints() {
		if ep.URL == d.cfg.Endpoints[i] {
			return ep.Capacity
		}
	}
	return sglang.Capacity{}
}

// watch health-checks server i every HealthInterval and, under kv-budget, polls its load every
// PollInterval. It returns when the server is drained (the caller probes it again), ctx ends or the
// Controller fails.
func (d *driver) watch(ctx context.Context, i int) {
	drained := d.ctl.Drained(i)
	health := time.NewTicker(d.cfg.HealthInterval)
	defer health.Stop()
	var poll <-chan time.Time
	if d.cfg.Policy == admission.PolicyKVBudget {
		t := time.NewTicker(d.cfg.Budget.PollInterval)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-drained:
			return
		case <-health.C:
			_ = d.ctl.Health(ctx, i) // counted by the Controller: Ready says what it did
		case <-poll:
			if restarted, _ := d.ctl.Poll(ctx, i); restarted { // errors are logged by the Controller
				return
			}
		}
		if ctx.Err() != nil || d.ctl.Err() != nil || !d.ctl.Ready(i) {
			return
		}
	}
}

// do runs one request to completion: it waits for admission, sends the request, and retries connection
// errors, timeouts, 5xx and 503 answers and aborts without status with exponential backoff, on another
// server where one is ready. An attempt in flight on a server that gets drained is cut short at once and
// retried. It returns the Result, a *admission.RejectedError for a request the server refuses (HTTP 400,
// an abort with a 4xx status, an invalid answer, MaxServerErrors HTTP 500s or MaxTimeouts attempts that ran
// into RequestTimeout), errNotStarted once startBy (nil: never) closes while the request waits for a server,
// or ctx's error once ctx ends; an attempt cut short by ctx, its timeout or a drain is aborted on its server.
func (d *driver) do(ctx context.Context, r *admission.Request, startBy <-chan struct{}) (*outcome, error) {
	if r.Sampling.MaxNewTokens <= 0 {
		return nil, errors.New("generate: request without max_new_tokens")
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(d.cfg.RetryInitial),
		backoff.WithMaxInterval(d.cfg.RetryMax),
		backoff.WithMaxElapsedTime(0),
	)
	var t *admission.Ticket
	op := func() (*outcome, error) {
		if t == nil {
			t = d.ctl.Offer(r, nil)
		} else {
			t = d.ctl.Retry(t, nil)
		}
		if err := d.await(ctx, t, startBy); err != nil {
			return nil, backoff.Permanent(err)
		}
		return d.attempt(ctx, t)
	}
	notify := func(err error, wait time.Duration) {
		d.log.Debug("retrying request", "rid", r.RID, "err", err, "in", wait)
	}
	return backoff.RetryNotifyWithData(op, backoff.WithContext(b, ctx), notify)
}

// await waits until t is admitted. When ctx ends or startBy closes first, t is withdrawn.
func (d *driver) await(ctx context.Context, t *admission.Ticket, startBy <-chan struct{}) error {
	var gaveUp error
	select {
	case <-t.Granted():
		return nil
	case <-ctx.Done():
		gaveUp = ctx.Err()
	case <-startBy:
		gaveUp = errNotStarted
	}
	d.ctl.Withdraw(t)
	return gaveUp
}

// attempt sends an admitted ticket's request and settles the ticket. It returns the Result, the attempt's
// error when the request is to be retried, or a backoff.Permanent error.
func (d *driver) attempt(ctx context.Context, t *admission.Ticket) (*outcome, error) {
	url := d.cfg.Endpoints[t.Endpoint()]
	cl := d.ctl.Client(t.Endpoint())
	req := d.ctl.GenerateRequest(t)
	actx, cancel := d.attemptContext(ctx, t)
	start := time.Now()
	resp, found, err := d.generate(actx, cl, req)
	cause := context.Cause(actx)
	cancel()
	switch {
	case err == nil:
		res, err := d.ctl.Finish(t, resp, time.Since(start))
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		return &outcome{Result: res, loop: found}, nil
	case ctx.Err() != nil:
		// Abandoned: make sure the server stops spending KV on it.
		d.abort(ctx, url, cl, req.RID)
		d.ctl.Withdraw(t)
		return nil, backoff.Permanent(ctx.Err())
	case errors.Is(cause, admission.ErrRequestTimeout):
		d.abort(ctx, url, cl, req.RID)
		err = fmt.Errorf("%w: %w", admission.ErrRequestTimeout, err)
	case errors.Is(cause, errDrained):
		// The same, beside the retry: a drained server may not answer, and the retry need not wait.
		d.aborts.Go(func() { d.abort(ctx, url, cl, req.RID) })
	}
	if err := d.ctl.Fail(t, err); err != nil {
		return nil, backoff.Permanent(err)
	}
	return nil, err
}

// generate sends one attempt: a plain /generate, or, when loops are watched, a streamed one whose output
// ids go through a loop detector as they arrive; a loop found is stopped on the server (/abort_request)
// unless loops are only marked. It returns the answer and the loop found, if any.
func (d *driver) generate(ctx context.Context, cl *sglang.Client, req *sglang.GenerateRequest) (*sglang.GenerateResponse, *loop.Loop, error) {
	if d.loops == nil {
		resp, err := cl.Generate(ctx, req)
		return resp, nil, err
	}
	det, err := loop.New(d.loops.Config)
	if err != nil {
		return nil, nil, err
	}
	stop := d.loops.stops()
	res, err := cl.GenerateStream(ctx, req, func(ids []uint32) bool { return det.Feed(ids) >= 0 && stop })
	if err != nil {
		return nil, nil, err
	}
	l, ok := det.Found()
	if !ok {
		return res.Response, nil, nil
	}
	return res.Response, &l, nil
}

// attemptContext is the context of one attempt: ctx, bounded by RequestTimeout (cause
// admission.ErrRequestTimeout) and cut short when t's server is drained (cause errDrained). The returned
// function ends it and waits for the drain watch it started.
func (d *driver) attemptContext(ctx context.Context, t *admission.Ticket) (context.Context, context.CancelFunc) {
	dctx, drainCancel := context.WithCancelCause(ctx)
	actx, cancel := context.WithTimeoutCause(dctx, d.cfg.RequestTimeout, admission.ErrRequestTimeout)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-t.Drained():
			drainCancel(errDrained)
		case <-actx.Done():
		}
	}()
	return actx, func() {
		cancel()
		<-watched
		drainCancel(nil)
	}
}

// abort tells the server to stop working on an abandoned attempt's rid, even once ctx has ended; best
// effort, bounded by abortTimeout.
func (d *driver) abort(ctx context.Context, url string, cl *sglang.Client, rid string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if err := cl.Abort(actx, rid); err != nil {
		d.log.Debug("abort_request failed", "endpoint", url, "rid", rid, "err", err)
	}
}

// wait waits for the aborts do sent beside its retries.
func (d *driver) wait() { d.aborts.Wait() }
