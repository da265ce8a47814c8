package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Lanes runs a Fleet as serve does: one lane per Service, a
// reconcile.Coalescer whose reconciles are that Service's alone
// (ReconcileService) with its own reconcile.FollowUp over the targets'
// check readers. So a Service's servers gated for their first check enter
// service within a poll of it passing, its failures are retried and its
// drained servers deleted, as in the single-Service mode, without a full
// reconcile. A full reconcile (Full) hands each Service's result to its
// lane's follow-up when something is left to do.
//
// A lane is made when its Service is poked or a full reconcile lists it,
// and dropped when its Service is not selected any more (a reconcile of it
// says so, or a full reconcile does not list it): memory is bounded by the
// selected Services. At most Concurrency lanes reconcile at once.
//
// Lanes answers the HTTP API too (Reconcile, ReconcileService,
// ReconcileServices), so that a POST's reconciles are followed up alike.
type Lanes struct {
	Fleet *Fleet
	// Checks are the targets' check readers, by Driver.Name (those with a
	// runtime socket).
	Checks map[string]reconcile.CheckReader
	// Tune, when set, adjusts each lane's FollowUp before its first use
	// (its clock and periods, in tests).
	Tune func(*reconcile.FollowUp)
	// Log, when set, is each lane's FollowUp.Log.
	Log *slog.Logger
	// OnPoked, when set, is told the result of each lane reconcile that
	// served a poke (the watch's, or a follow-up's); Followed of each
	// follow-up poke.
	OnPoked  func(key string, res reconcile.Result, err error)
	Followed func(key, reason string, coalesced bool)
	// LeftAgain, when set, is handed the left backends a later reconcile
	// has work for (see Left); it must not block (a watch.Queue's Left).
	LeftAgain func(backends []string)

	once     sync.Once
	runs     context.Context // every reconcile's; EndRuns cancels it
	endRuns  context.CancelFunc
	sem      chan struct{}
	mu       sync.Mutex
	lanes    map[string]*lane
	closing  bool
	inflight int
	idle     chan struct{} // closed when inflight falls to 0
	// leftFollow follows the left backends up; leftLast holds the last
	// targets of those with work left.
	leftFollow *reconcile.FollowUp
	leftLast   map[string][]reconcile.TargetResult
	// turn orders lane runs and full reconciles by when they began (cover).
	turn atomic.Uint64
}

type lane struct {
	key    string
	c      *reconcile.Coalescer
	follow *reconcile.FollowUp

	mu      sync.Mutex
	last    Result // the last reconcile's, for the HTTP API
	lastErr error
	// waiters are the turns of the runs waiting for a slot; cover is the
	// part for this Service of a full reconcile that began after one of
	// them, coverSet is closed when it is set (and replaced); used is the
	// turn of the last full reconcile that answered a run (cover.go).
	waiters  map[uint64]bool
	cover    *cover
	coverSet chan struct{}
	used     uint64
}

// ErrShuttingDown answers a reconcile asked for once Close was called.
var ErrShuttingDown = errors.New("the service is shutting down; try again (another replica may answer)")

func (l *Lanes) init() {
	l.once.Do(func() {
		l.runs, l.endRuns = context.WithCancel(context.Background())
		l.sem = make(chan struct{}, Concurrency)
		l.lanes = map[string]*lane{}
		l.leftFollow = &reconcile.FollowUp{}
		if l.Tune != nil {
			l.Tune(l.leftFollow)
		}
	})
}

// Poke asks for a reconcile of the Service key without waiting for it.
func (l *Lanes) Poke(key string) (coalesced bool) {
	return l.lane(key).c.Poke()
}

// Run reconciles the Service key through its lane and waits: a reconcile
// that starts after the call, shared with the pokes that came meanwhile.
// A Service not selected is a *NotSelectedError.
func (l *Lanes) Run(ctx context.Context, key string) (Result, error) {
	ln := l.lane(key)
	if _, err := ln.c.Do(ctx); err != nil {
		var late *reconcile.LateError
		if errors.As(err, &late) {
			return Result{}, err
		}
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.last, ln.lastErr
}

// Full reconciles every selected Service, hands each result that leaves
// work (servers waiting for their check or their sessions, hand-overs, a
// failure) to its Service's lane's follow-up, and drops the lanes of
// Services not selected any more.
func (l *Lanes) Full(ctx context.Context) (Result, error) {
	l.init()
	if !l.enter() {
		return shuttingDown(), ErrShuttingDown
	}
	defer l.exit()
	ctx, cancel := l.bound(ctx)
	defer cancel()
	turn := l.turn.Add(1)
	res, err := l.Fleet.run(ctx, "", nil, false, l.covering(turn))
	if err != nil && !errors.Is(err, ErrServices) {
		return res, err // nothing was listed: no lane is known to end
	}
	keep := map[string]bool{}
	for _, s := range res.Services {
		keep[s.Service] = true
		if ln := l.existing(s.Service); ln != nil && ln.answeredBy(turn) {
			continue // its follow-up was handed this result by the run it answered
		}
		l.observe(s)
	}
	l.mu.Lock()
	for k, ln := range l.lanes {
		if !keep[k] {
			l.dropLocked(ln)
		}
	}
	l.mu.Unlock()
	// The owned class backends no Service wants (draining) were reconciled
	// as left: followed up as the watch's left backends are, or their
	// parked servers would wait for the next full reconcile.
	var left []string
	for _, r := range res.Left {
		left = append(left, r.Backend)
	}
	if len(left) > 0 {
		l.followLeft(left, res, err)
	}
	return res, err
}

// observe hands a Service's part of a reconcile that was not its lane's
// (a full one, a left backend's hand-over) to its lane's follow-up.
func (l *Lanes) observe(s ServiceResult) {
	var serr error
	if s.Status == reconcile.StatusError {
		serr = errors.New(s.Error)
	}
	// Every Service's result, not only those with servers waiting: the
	// follow-up also confirms what the deletion guard parked and watches
	// pods held by the readiness gate, which only it can tell.
	ln := l.lane(s.Service)
	ln.follow.Observe(s.Result, serr, func(reason string) { l.followed(ln, reason) })
}

// Left reconciles backends no Service names any more (Fleet.ReconcileLeft),
// and follows them up as a lane does: those whose servers wait for their
// sessions to end or for the guard's confirming read, or whose reconcile
// failed, are handed to LeftAgain when a later reconcile has work (they
// are parked meanwhile, out of traffic).
func (l *Lanes) Left(ctx context.Context, backends []string) (Result, error) {
	l.init()
	if !l.enter() {
		return shuttingDown(), ErrShuttingDown
	}
	defer l.exit()
	ctx, cancel := l.bound(ctx)
	defer cancel()
	res, err := l.Fleet.ReconcileLeft(ctx, backends)
	l.followLeft(backends, res, err)
	// A Service that still names a left backend (a claim that ended hands
	// it over) was reconciled for it: its lane finishes what that left,
	// e.g. the old holder's servers the guard parked, the new ones waiting
	// for their check; nothing else would poke it.
	for _, s := range res.Services {
		l.observe(s)
	}
	return res, err
}

// followLeft records which left backends still have work, and has the
// left follow-up watch them all.
func (l *Lanes) followLeft(asked []string, res Result, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leftLast == nil {
		l.leftLast = map[string][]reconcile.TargetResult{}
	}
	listed := err == nil || errors.Is(err, ErrServices)
	if listed {
		for _, b := range asked {
			delete(l.leftLast, b) // named again, or done below
		}
	}
	for _, r := range res.Left {
		if r.Status == reconcile.StatusError || r.Pending() || !finished(r.Result) {
			l.leftLast[r.Backend] = r.Targets
		}
	}
	if !listed {
		for _, b := range asked {
			if _, ok := l.leftLast[b]; !ok {
				l.leftLast[b] = nil
			}
		}
	}
	var all reconcile.Result
	for _, t := range l.leftLast {
		all.Targets = append(all.Targets, t...)
	}
	var ferr error
	failedAny := !listed || slices.ContainsFunc(res.Left, func(r LeftResult) bool { return r.Status == reconcile.StatusError })
	if failedAny {
		ferr = ErrServices
	}
	l.leftFollow.Observe(all, ferr, func(string) {
		l.mu.Lock()
		again := make([]string, 0, len(l.leftLast))
		for b := range l.leftLast {
			again = append(again, b)
		}
		l.mu.Unlock()
		slices.Sort(again)
		if len(again) > 0 && l.LeftAgain != nil {
			l.LeftAgain(again)
		}
	})
}

// Reconcile is the HTTP API's full reconcile: Full, or the Fleet's dry run.
func (l *Lanes) Reconcile(ctx context.Context, dryRun bool) (Result, error) {
	if dryRun {
		return l.Fleet.Reconcile(ctx, true)
	}
	return l.Full(ctx)
}

// ReconcileService is the HTTP API's ?service=: Run, or the Fleet's dry run.
func (l *Lanes) ReconcileService(ctx context.Context, key string, dryRun bool) (Result, error) {
	if dryRun {
		return l.Fleet.ReconcileService(ctx, key, true)
	}
	return l.Run(ctx, key)
}

// ReconcileServices runs the lanes of keys at once (Concurrency reconcile
// at a time) and reports them together: what a CloudEvent batch about
// several Services asks for. A key not selected is no error: it is left
// out (Refused says why, when it was refused).
func (l *Lanes) ReconcileServices(ctx context.Context, keys []string) (Result, error) {
	outs := make([]Result, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { outs[i], errs[i] = l.Run(ctx, k) })
	}
	wg.Wait()
	res := Result{Services: []ServiceResult{}, Refused: []services.Refused{}}
	refused := map[string]bool{}
	for i := range keys {
		var nse *NotSelectedError
		var late *reconcile.LateError
		switch {
		case errors.As(errs[i], &nse):
		case errors.As(errs[i], &late):
			return Result{}, errs[i]
		case len(outs[i].Services) == 0 && errs[i] != nil:
			// Nothing listed for this key: its error stands for it.
			res.Services = append(res.Services, ServiceResult{Service: keys[i], Result: failed(outs[i].Error, outs[i].ErrorClass)})
		}
		res.Services = append(res.Services, outs[i].Services...)
		res.DurationMs = max(res.DurationMs, outs[i].DurationMs)
		for _, r := range outs[i].Refused {
			if id := r.Service + "\x00" + r.Reason; !refused[id] {
				refused[id] = true
				res.Refused = append(res.Refused, r)
			}
		}
	}
	slices.SortFunc(res.Services, func(a, b ServiceResult) int { return strings.Compare(a.Service, b.Service) })
	err := summarize(&res, false, false)
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

// Close starts the shutdown: no reconcile starts from now on and no
// follow-up pokes; Idle says when the running ones ended, EndRuns cancels
// them.
func (l *Lanes) Close() {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	l.leftFollow.Stop()
	for _, ln := range l.lanes {
		ln.follow.Stop()
	}
}

// EndRuns cancels the reconciles still running (their drivers still clean
// up on a fresh short context).
func (l *Lanes) EndRuns() { l.init(); l.endRuns() }

// Idle returns a channel closed once no reconcile runs.
func (l *Lanes) Idle() <-chan struct{} {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.idle
}

// Len is the number of lanes kept.
func (l *Lanes) Len() int {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lanes)
}

// existing returns key's lane, or nil.
func (l *Lanes) existing(key string) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lanes[key]
}

// lane returns key's lane, made on first use.
func (l *Lanes) lane(key string) *lane {
	l.init()
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.lanes[key]; ln != nil {
		return ln
	}
	ln := &lane{key: key, follow: &reconcile.FollowUp{Checks: l.Checks, Log: l.Log}, coverSet: make(chan struct{})}
	if l.Tune != nil {
		l.Tune(ln.follow)
	}
	if l.closing {
		ln.follow.Stop()
	}
	ln.c = reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) { return l.run(ctx, ln) })
	ln.c.Follow(ln.follow, func(reason string, coalesced bool) {
		if l.Followed != nil {
			l.Followed(key, reason, coalesced)
		}
	})
	ln.c.OnPoked(func(res reconcile.Result, err error) {
		if l.OnPoked != nil {
			l.OnPoked(key, res, err)
		}
	})
	l.lanes[key] = ln
	return ln
}

// followed is a follow-up's poke of ln that a full reconcile's result
// started.
func (l *Lanes) followed(ln *lane, reason string) {
	coalesced := ln.c.Poke()
	if l.Followed != nil {
		l.Followed(ln.key, reason, coalesced)
	}
}

// run is one reconcile of ln's Service: its part of the Fleet's result,
// for the lane's follow-up. A Service not selected any more ends its lane
// (nothing to follow up, and its backends are handed over as left).
func (l *Lanes) run(ctx context.Context, ln *lane) (reconcile.Result, error) {
	set := func(res Result, err error) {
		ln.mu.Lock()
		ln.last, ln.lastErr = res, err
		ln.mu.Unlock()
	}
	if !l.enter() {
		set(shuttingDown(), ErrShuttingDown)
		return failed(ErrShuttingDown.Error(), failure.Temporary), ErrShuttingDown
	}
	defer l.exit()
	ctx, cancel := l.bound(ctx)
	defer cancel()
	var res Result
	part, release, err := l.slot(ctx, ln)
	switch {
	case err != nil:
		err = fmt.Errorf("waiting for a reconcile slot: %w", err)
		set(Result{Status: reconcile.StatusError, Services: []ServiceResult{}, Refused: []services.Refused{}, Error: err.Error(), ErrorClass: failure.Temporary}, err)
		return failed(err.Error(), failure.Temporary), err
	case part != nil:
		res, err = answered(part)
		if l.Log != nil {
			l.Log.Debug("reconcile answered by a full reconcile that began after it", "service", ln.key)
		}
	default:
		defer release()
		res, err = l.Fleet.ReconcileService(ctx, ln.key, false)
	}
	set(res, err)
	var nse *NotSelectedError
	switch {
	case errors.As(err, &nse):
		l.mu.Lock()
		if l.lanes[ln.key] == ln {
			l.dropLocked(ln)
		}
		l.mu.Unlock()
		return reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{}, Skipped: []desired.Skipped{}}, nil
	case len(res.Services) == 1:
		r := res.Services[0].Result
		if err == nil && r.Status == reconcile.StatusError {
			// Its own failure fails no caller, but its lane retries it
			// with a growing pause, as any failure.
			err = errors.New(r.Error)
		}
		return r, err
	default: // the list failed
		return failed(res.Error, res.ErrorClass), err
	}
}

// slot waits for one of the Concurrency slots for a run of ln, and
// returns release; or the cover of a full reconcile that began after the
// run did, which answers it.
func (l *Lanes) slot(ctx context.Context, ln *lane) (part *cover, release func(), err error) {
	began, set := l.await(ln)
	defer ln.done(began)
	for {
		select {
		case l.sem <- struct{}{}:
			if c, _ := ln.coveredSince(began); c != nil {
				<-l.sem
				return c, nil, nil
			}
			return nil, func() { <-l.sem }, nil
		case <-set:
			var c *cover
			if c, set = ln.coveredSince(began); c != nil {
				return c, nil, nil
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// dropLocked forgets ln and ends its follow-up; a reconcile of it still
// running ends by itself. l.mu is held.
func (l *Lanes) dropLocked(ln *lane) {
	ln.follow.Stop()
	delete(l.lanes, ln.key)
}

// bound derives a reconcile's context: not cancelled by its caller (others
// may share it), but by EndRuns.
func (l *Lanes) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(l.runs, cancel)
	return ctx, func() { stop(); cancel() }
}

func (l *Lanes) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	if l.inflight == 0 {
		l.idle = make(chan struct{})
	}
	l.inflight++
	return true
}

func (l *Lanes) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if l.inflight == 0 {
		close(l.idle)
	}
}

func failed(msg string, class failure.Class) reconcile.Result {
	return reconcile.Result{Status: reconcile.StatusError, Error: msg, ErrorClass: class, Targets: []reconcile.TargetResult{}, Skipped: []desired.Skipped{}}
}

func shuttingDown() Result {
	return Result{Status: reconcile.StatusError, Services: []ServiceResult{}, Refused: []services.Refused{},
		Error: ErrShuttingDown.Error(), ErrorClass: failure.Temporary}
}
