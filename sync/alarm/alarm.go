// Package alarm says aloud what stays wrong, and says nothing while all is
// well. A problem (a target unreachable, a backend HAProxy refuses, a
// certificate pair that does not load, a server whose check has not passed
// for a minute) is warned about once when it is seen (or once it has lasted
// its grace), again at a slow, bounded rate while it lasts, and said at info
// once when it mends; a gauge says which are open.
//
// What to say is decided by Decide, a pure function of the problem's state,
// whether it is seen now, and the time; Book keeps the states and says it.
// Problems are fed by the reconciles' results (Observe) and by a probe that
// runs in serve whether or not a reconcile does (Probe), so an HAProxy that
// stops answering is said within the probe's period, not at the next
// Kubernetes change.
package alarm

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Kind is a kind of problem.
type Kind string

// The kinds of problems.
const (
	// Unreachable: nothing answers at the target (failure.Unreachable).
	Unreachable Kind = "unreachable"
	// BackendRefused: the target's backend cannot be managed as
	// configured (failure.BackendError).
	BackendRefused Kind = "backend-refused"
	// TLSPair: the runtime socket's certificate files do not load.
	TLSPair Kind = "tls-pair"
	// CheckNotPassed: a server held out of traffic whose check has not
	// passed (warned once it lasted CheckGrace).
	CheckNotPassed Kind = "check-not-passed"
)

// CheckGrace is how long a server may wait for its first passed check
// before it is warned about: on the shipped check timing a server that
// answers passes in about a second, and one that takes a minute does not
// answer.
const CheckGrace = time.Minute

// Every is how often a problem that lasts is warned about again: the rate
// of the reconciler's own lasting warnings.
const Every = reconcile.LastingEvery

// grace is how long a problem of kind lasts before it is warned about.
func grace(k Kind) time.Duration {
	if k == CheckNotPassed {
		return CheckGrace
	}
	return 0
}

// State is what is remembered of one problem.
type State struct {
	// Since is when it was first seen, in the run that lasts; zero while
	// all is well.
	Since time.Time
	// Said is when it was last warned about; zero before.
	Said time.Time
}

// Say is what Decide says to do.
type Say string

// What to say.
const (
	Quiet  Say = ""
	Warn   Say = "warn"   // first warning
	Again  Say = "again"  // a lasting problem, at most once per every
	Mended Say = "mended" // it was warned about and is gone: info
)

// Decide says what to log of a problem in state s, seen now (bad) or not,
// with grace before the first warning and every between two, and returns
// its next state. A problem that mends before its grace was never said, so
// its mending is not either.
func Decide(s State, bad bool, now time.Time, grace, every time.Duration) (Say, State) {
	switch {
	case !bad && !s.Said.IsZero():
		return Mended, State{}
	case !bad:
		return Quiet, State{}
	case s.Since.IsZero():
		s.Since = now
	}
	switch {
	case s.Said.IsZero() && now.Sub(s.Since) >= grace:
		s.Said = now
		return Warn, s
	case !s.Said.IsZero() && now.Sub(s.Said) >= every:
		s.Said = now
		return Again, s
	}
	return Quiet, s
}

type key struct {
	kind    Kind
	subject string
}

type entry struct {
	State
	bad    bool   // as last seen
	detail string // what was seen, for the log
}

// Book keeps the problems' states and says them on Log. The zero value
// needs Log; Now and Every default to the clock and Every.
type Book struct {
	Log *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Every overrides the const Every (tests).
	Every time.Duration
	// OnChange, when set, is told when a problem is first warned about
	// (open) and when it mends: the gauge.
	OnChange func(kind Kind, subject string, open bool)

	mu      sync.Mutex
	entries map[key]*entry
}

// Observe records whether the problem kind of subject is seen now, with
// what was seen, and says what Decide says.
func (b *Book) Observe(kind Kind, subject string, bad bool, detail string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.observe(key{kind, subject}, bad, detail)
}

// Report records, for every subject of kind under scope (a prefix: the
// target, or the target and backend followed by a space), the ones seen
// bad now, with what was seen; the others under scope mend.
func (b *Book) Report(kind Kind, scope string, bad map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if _, still := bad[k.subject]; k.kind == kind && strings.HasPrefix(k.subject, scope) && !still {
			b.observe(k, false, "")
		}
	}
	for _, s := range slices.Sorted(maps.Keys(bad)) {
		b.observe(key{kind, s}, true, bad[s])
	}
}

// Mend records as mended those subjects of kind under scope that keep
// reports false; it adds none (the probe can tell a server's check passed,
// not that it is held for it).
func (b *Book) Mend(kind Kind, scope string, keeps func(subject string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if k.kind == kind && strings.HasPrefix(k.subject, scope) && !keeps(k.subject) {
			b.observe(k, false, "")
		}
	}
}

// Tick decides again for every problem as last seen: a grace that ran
// out, a warning due again, though nothing new was seen.
func (b *Book) Tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.entries {
		b.observe(k, e.bad, e.detail)
	}
}

// Open lists the problems warned about and not mended, as "kind subject".
func (b *Book) Open() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k, e := range b.entries {
		if !e.Said.IsZero() {
			out = append(out, string(k.kind)+" "+k.subject)
		}
	}
	slices.Sort(out)
	return out
}

func (b *Book) observe(k key, bad bool, detail string) {
	if b.entries == nil {
		b.entries = map[key]*entry{}
	}
	e := b.entries[k]
	if e == nil {
		if !bad {
			return // nothing known, nothing wrong
		}
		e = &entry{}
		b.entries[k] = e
	}
	say, next := Decide(e.State, bad, b.now(), grace(k.kind), b.every())
	e.State, e.bad = next, bad
	if bad {
		e.detail = detail
	}
	if !bad {
		delete(b.entries, k)
	}
	switch say {
	case Warn, Again:
		b.Log.Warn(message(k.kind), "kind", string(k.kind), "subject", k.subject, "since", next.Since.UTC().Format(time.RFC3339),
			"for", b.now().Sub(next.Since).Round(time.Second).String(), "detail", e.detail, "again", say == Again)
		if say == Warn && b.OnChange != nil {
			b.OnChange(k.kind, k.subject, true)
		}
	case Mended:
		b.Log.Info(string(k.kind)+" mended", "kind", string(k.kind), "subject", k.subject)
		if b.OnChange != nil {
			b.OnChange(k.kind, k.subject, false)
		}
	}
}

// message is the warning of each kind: what is wrong and where to look.
func message(k Kind) string {
	switch k {
	case Unreachable:
		return "HAProxy target unreachable: nothing is written to it until it answers"
	case BackendRefused:
		return "backend refused: it cannot be managed as configured, nothing is written to it"
	case TLSPair:
		return "runtime TLS certificate pair does not load: the admin socket cannot be reached"
	case CheckNotPassed:
		return "server's health check has not passed: it takes no traffic; does something answer at its address and port?"
	}
	return string(k)
}

func (b *Book) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func (b *Book) every() time.Duration {
	if b.Every > 0 {
		return b.Every
	}
	return Every
}
