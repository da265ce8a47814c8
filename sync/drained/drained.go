// Package drained tells whether one server is out of rotation with no
// sessions left on every HAProxy target: what a preStop hook or a
// node-termination handler waits for before it lets a pod or a node go.
// It only reads HAProxy; it never changes a server's state (the reconcile
// does that, from Kubernetes).
package drained

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Reader reads one HAProxy target's backend; every reconcile.Driver is one.
type Reader interface {
	Name() string
	Read(ctx context.Context, backend string) (model.Backend, error)
}

// Query names the server to wait for: by a Node's name (node mode) or by
// address (a pod IP, or a Node's InternalIP). Exactly one is set.
type Query struct {
	Server  string
	Address netip.Addr
}

// matches reports whether s is the server q asks for, among names (the
// names the Node's server may have; see Checker.Names).
func (q Query) matches(s model.Server, names []string) bool {
	if q.Server != "" {
		return slices.Contains(names, s.Name)
	}
	a, err := netip.ParseAddr(s.Address)
	return err == nil && a.Unmap() == q.Address.Unmap()
}

// States of a server on one target.
const (
	// Absent: the target has no such server (deleted, or never added).
	Absent = "absent"
	// Unknown: the target's state could not be read.
	Unknown = "unknown"
)

// TargetState is the server as one target shows it.
type TargetState struct {
	Target  string `json:"target"`
	Backend string `json:"backend"`
	// Server is the matching server's name; empty when absent.
	Server string `json:"server,omitempty"`
	// State is ready, drain, maint, Absent or Unknown.
	State string `json:"state"`
	// Sessions counts its current sessions and queued requests; -1 when
	// the target cannot tell (no runtime view).
	Sessions int    `json:"sessions"`
	Drained  bool   `json:"drained"`
	Error    string `json:"error,omitempty"`
}

// Status values of an Answer.
const (
	StatusDrained = "drained"
	StatusWaiting = "waiting"
	// StatusAbsent: every target was read and none has the server. At the
	// first look that is most often a wrong name or address (a typo, a pod
	// IP in node mode), not a server already gone: the caller decides.
	StatusAbsent = "absent"
)

// Answer is the server's state on every target and backend.
type Answer struct {
	// Status is StatusDrained once every target shows the server drained,
	// StatusAbsent when no target has it at all, StatusWaiting otherwise.
	Status  string        `json:"status"`
	Targets []TargetState `json:"targets"`
}

// Drained reports whether every target shows the server drained.
func (a Answer) Drained() bool { return a.Status == StatusDrained }

// Checker reads the configured targets and backends.
type Checker struct {
	Targets  []Reader
	Backends []string
	// Names gives the names a Node's server may have (CLUSTER_NAME's
	// prefix, a backup's suffix); nil: the Node's name itself.
	Names func(node string) []string
	// Owner is the name prefix of this instance's servers (CLUSTER_NAME
	// and "-", model.Owns): another cluster's server at the same address
	// is not the one asked for. Empty: every server.
	Owner string
	// Poll is the pause between two reads while Wait waits (0: 500 ms).
	Poll time.Duration
}

// Check reads every target once, in parallel, and answers.
func (c *Checker) Check(ctx context.Context, q Query) Answer {
	names := []string{q.Server}
	if c.Names != nil && q.Server != "" {
		names = c.Names(q.Server)
	}
	match := func(s model.Server) bool { return model.Owns(c.Owner, s.Name) && q.matches(s, names) }
	states := make([][]TargetState, len(c.Targets))
	var wg sync.WaitGroup
	for i, t := range c.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range c.Backends {
				states[i] = append(states[i], state(ctx, t, b, match)...)
			}
		}()
	}
	wg.Wait()
	a := Answer{Status: StatusDrained, Targets: []TargetState{}}
	absent := true
	for _, ts := range states {
		for _, s := range ts {
			if !s.Drained {
				a.Status = StatusWaiting
			}
			absent = absent && s.State == Absent
			a.Targets = append(a.Targets, s)
		}
	}
	if absent && len(a.Targets) > 0 {
		a.Status = StatusAbsent
	}
	return a
}

// Wait checks until the server is drained everywhere or the bound has
// passed, and returns the last answer; a zero bound checks once. The bound
// ends the waiting, not a read under way, so the last answer is a whole
// one; ctx ends both (the caller is gone). A server absent at the first
// check is answered StatusAbsent at once; one that was there and is gone
// (deleted once drained) is drained.
func (c *Checker) Wait(ctx context.Context, q Query, bound time.Duration) Answer {
	poll := c.Poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	deadline := time.Now().Add(bound)
	for first := true; ; first = false {
		a := c.Check(ctx, q)
		if a.Status == StatusAbsent && !first {
			a.Status = StatusDrained
		}
		left := time.Until(deadline)
		if a.Status != StatusWaiting || left <= 0 || ctx.Err() != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(min(poll, left)):
		}
	}
}

// state is the server on one backend of one target. A server is drained
// when it is absent, or out of rotation (drain or maint) with no session
// and no queued request. Without a runtime view its sessions are unknown,
// so it is never drained.
func state(ctx context.Context, t Reader, backend string, match func(model.Server) bool) []TargetState {
	b, err := t.Read(ctx, backend)
	if err != nil {
		// The driver's error says what it read; the entry names the
		// target and backend.
		return []TargetState{{Target: t.Name(), Backend: backend, State: Unknown, Sessions: -1, Error: err.Error()}}
	}
	var out []TargetState
	for _, s := range b.Servers {
		if !match(s) {
			continue
		}
		ts := TargetState{Target: t.Name(), Backend: backend, Server: s.Name, State: string(s.State), Sessions: -1}
		switch {
		case s.Runtime == nil:
			ts.Error = "sessions unknown: this target has no runtime view (HAPROXY_RUNTIME_URL)"
		default:
			ts.Sessions = s.Runtime.Sessions
			ts.Drained = s.State != model.Ready && ts.Sessions == 0
		}
		out = append(out, ts)
	}
	if len(out) == 0 {
		out = append(out, TargetState{Target: t.Name(), Backend: backend, State: Absent, Drained: true})
	}
	return out
}

// String is the entry in one line, for LOG_FORMAT=text (whose handler
// prints a struct as {Target:… Backend:…}): "http://haproxy:5555 be node-a
// drain, 2 sessions".
func (t TargetState) String() string {
	s := fmt.Sprintf("%s %s %s %s, %d sessions", t.Target, t.Backend, cmp.Or(t.Server, "-"), t.State, t.Sessions)
	if t.Drained {
		s += ", drained"
	}
	if t.Error != "" {
		s += " (" + t.Error + ")"
	}
	return s
}
