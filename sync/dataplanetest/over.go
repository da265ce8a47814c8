package dataplanetest

import (
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// Over starts a test API over the real HAProxy h, as the real dataplaneapi
// runs beside one: opts.RuntimeSocket is h's, and every reload the API runs
// writes what it holds into h's haproxy.cfg — the class sections
// (ClassSection) and the servers of each of the operator's backends
// (operator; else a reload drops servers the API holds, which the real one
// never does) — and reloads h. reloaded, when set, is told of each, once
// HAProxy runs the new configuration. A failed write or reload fails t
// (from the reloading goroutine: Errorf).
func Over(t testing.TB, h *haproxytest.HAProxy, opts Options, reloaded func(began, ended time.Time), operator ...string) *Server {
	t.Helper()
	var s *Server
	opts.RuntimeSocket = h.AdminSocket
	opts.Reload = func() {
		began := time.Now()
		if reloaded != nil {
			defer func() { reloaded(began, time.Now()) }()
		}
		if err := h.TrySetSections(s.Sections(ClassSection)); err != nil {
			t.Errorf("write haproxy.cfg: %v", err)
			return
		}
		for _, be := range operator {
			if err := h.TrySetServers(be, s.ServerLines(be)); err != nil {
				t.Errorf("write haproxy.cfg: %v", err)
				return
			}
		}
		// The master re-executes itself at a reload: right after one, its
		// socket may refuse a connection for a moment (TryReload waits 10 s
		// for it; once more, then it is dead).
		err := h.TryReload()
		for i := 0; err != nil && strings.HasPrefix(err.Error(), "master socket") && i < 1; i++ {
			time.Sleep(50 * time.Millisecond)
			err = h.TryReload()
		}
		if err != nil {
			t.Errorf("reload: %v", err)
		}
	}
	s = New(t, opts)
	return s
}
