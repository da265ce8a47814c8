// Package pair checks that a target's runtime socket and its Data Plane API
// talk to the same HAProxy. With both HAPROXY_DATAPLANE_URL and
// HAPROXY_RUNTIME_URL set, target i is Data Plane URL i with runtime socket
// i: the API writes haproxy.cfg and the socket gates servers and reads their
// checks and sessions. Paired across two HAProxy (URLs listed in another
// order, a Service that routes to another pod), the socket gates servers the
// API never added, and sessions, checks and UP states come from the wrong
// process: deletions and make-before-break decide on what another HAProxy
// shows.
//
// Both report the worker that answers them: the socket's "show info" and the
// API's GET /services/haproxy/runtime/info (the spec's process_info, read by
// the API through its own runtime socket). Compare decides from the two
// views (pure); Check reads them; Guard keeps the verdict for one target.
package pair

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// Process is what one view reports of the HAProxy worker that answers it.
type Process struct {
	// PID is the worker's process id; 0 when not reported.
	PID int64
	// Node is HAProxy's node name (global "node", the host name by
	// default); empty when not reported.
	Node string
	// Uptime is how long the worker has run, in whole seconds, when
	// HasUptime.
	Uptime    time.Duration
	HasUptime bool
}

func (p Process) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", p.PID)
	if p.Node != "" {
		fmt.Fprintf(&b, ", node %q", p.Node)
	}
	if p.HasUptime {
		fmt.Fprintf(&b, ", up %s", p.Uptime)
	}
	return b.String()
}

// Verdict is what Compare concludes.
type Verdict int

// The verdicts.
const (
	// Unknown: a view lacks the process id; nothing can be concluded.
	Unknown Verdict = iota
	// Same: one worker.
	Same
	// Different: two processes.
	Different
)

func (v Verdict) String() string {
	switch v {
	case Same:
		return "same"
	case Different:
		return "different"
	}
	return "unknown"
}

// UptimeSlack is how far two uptimes of one worker may differ beyond the
// time between the reads: each is whole seconds, truncated.
const UptimeSlack = 2 * time.Second

// Compare decides whether the runtime socket's view (rt) and the Data Plane
// API's (dp), read gap apart, are of one worker. The process ids must be
// equal, and the node names where both report one: in containers every
// HAProxy may run as the same small pid, and the node name (the pod's
// host name by default) tells them apart. Uptimes, where both report one,
// must agree within UptimeSlack plus gap, against a pid reused by another
// HAProxy on the same host. why names what differs.
func Compare(rt, dp Process, gap time.Duration) (v Verdict, why string) {
	if rt.PID == 0 || dp.PID == 0 {
		return Unknown, "a process id is missing"
	}
	var diff []string
	if rt.PID != dp.PID {
		diff = append(diff, "process ids")
	}
	if rt.Node != "" && dp.Node != "" && rt.Node != dp.Node {
		diff = append(diff, "node names")
	}
	if rt.HasUptime && dp.HasUptime && (rt.Uptime-dp.Uptime).Abs() > UptimeSlack+gap.Abs() {
		diff = append(diff, "uptimes")
	}
	if len(diff) > 0 {
		return Different, strings.Join(diff, ", ") + " differ"
	}
	return Same, ""
}

// Reader reads one view of the worker.
type Reader interface {
	ProcessInfo(ctx context.Context) (Process, error)
}

// Outcome is one Check: the verdict and both views it came from.
type Outcome struct {
	Verdict            Verdict
	Why                string
	Runtime, Dataplane Process
}

// Check reads both views, one right after the other, and compares them. Views
// that differ are read once more after settle (unless it is 0): right after
// a reload, one of them may still have been answered by the old worker. An
// error (either view unreadable) comes with Verdict Unknown.
func Check(ctx context.Context, rt, dp Reader, settle time.Duration) (Outcome, error) {
	o, err := look(ctx, rt, dp)
	if err != nil || o.Verdict != Different || settle <= 0 {
		return o, err
	}
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Outcome{}, fmt.Errorf("read the views again: %w", ctx.Err())
	case <-t.C:
	}
	return look(ctx, rt, dp)
}

func look(ctx context.Context, rt, dp Reader) (Outcome, error) {
	start := time.Now()
	r, err := rt.ProcessInfo(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("runtime socket: show info: %w", err)
	}
	d, err := dp.ProcessInfo(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("Data Plane API: process info: %w", err)
	}
	v, why := Compare(r, d, time.Since(start))
	return Outcome{Verdict: v, Why: why, Runtime: r, Dataplane: d}, nil
}

// MismatchError is a target whose runtime socket and Data Plane API talk to
// different HAProxy: Permanent, nothing is written to it until they match.
type MismatchError struct {
	// Pair is the target's position in both lists, from 1.
	Pair int
	// Dataplane and Runtime are the URLs, without credentials.
	Dataplane, Runtime string
	Outcome
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("HAPROXY_DATAPLANE_URL %s and HAPROXY_RUNTIME_URL %s (pair %d) reach different HAProxy (%s): the Data Plane API reports %s, the runtime socket %s; list each Data Plane URL at the position of the runtime socket of the same HAProxy",
		e.Dataplane, e.Runtime, e.Pair, e.Why, e.Outcome.Dataplane, e.Outcome.Runtime)
}

// Class is Permanent: nothing helps until the URLs or what they reach change.
func (e *MismatchError) Class() failure.Class { return failure.Permanent }
