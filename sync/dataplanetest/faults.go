package dataplanetest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Fault is a failure injected in front of the API, as a crashing process, a
// proxy or an overloaded API would produce it. A request that gets a fault
// is not handled: nothing changes.
type Fault struct {
	// Writes limits the fault to requests other than GET.
	Writes bool
	// PathPrefix, when set, limits the fault to paths under it, e.g.
	// "/v3/services/haproxy/transactions/" (commits and deletes).
	PathPrefix string
	// Skip lets that many matching requests through before the fault starts.
	Skip int
	// Times is how many requests get the fault; 0 means all until ClearFault.
	Times int
	// Status answers with this status and a JSON error body (500, 502, 503,
	// 429, 409, ...). The body is not checked against the spec: in real life
	// it often comes from a proxy in front of the API.
	Status int
	// Message is the error body's message; "fault" if empty.
	Message string
	// RetryAfter is sent as Retry-After with Status.
	RetryAfter string
	// Hang holds the request without an answer until the client gives up,
	// the server closes, or the fault is replaced or cleared: then its
	// connection is closed, as the hung process went away.
	Hang bool
	// Drop closes the connection without an answer, as a process that
	// crashes or restarts mid-request does.
	Drop bool
}

type faultState struct {
	Fault
	seen, hit int
	// over is closed when the fault is replaced or cleared.
	over chan struct{}
}

// InjectFault installs f in place of any earlier fault.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endFault()
	s.fault = &faultState{Fault: f, over: make(chan struct{})}
}

// endFault releases the requests the fault holds; s.mu is held.
func (s *Server) endFault() {
	if s.fault != nil {
		close(s.fault.over)
	}
}

// ClearFault removes the fault: the API answers normally again.
func (s *Server) ClearFault() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endFault()
	s.fault = nil
}

// FaultsHit is how many requests got the current fault.
func (s *Server) FaultsHit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault == nil {
		return 0
	}
	return s.fault.hit
}

// injectFault answers r with the fault when it applies and reports whether
// it did.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	f := s.fault
	apply := f != nil && (!f.Writes || r.Method != http.MethodGet) &&
		strings.HasPrefix(r.URL.Path, f.PathPrefix)
	if apply {
		f.seen++
		apply = f.seen > f.Skip && (f.Times == 0 || f.hit < f.Times)
	}
	if apply {
		f.hit++
	}
	s.mu.Unlock()
	if !apply {
		return false
	}
	switch {
	case f.Hang:
		select {
		case <-r.Context().Done():
		case <-s.closing:
		case <-f.over:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return true
				}
			}
			panic(http.ErrAbortHandler)
		}
	case f.Drop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return true
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	default:
		msg := f.Message
		if msg == "" {
			msg = "fault"
		}
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": f.Status, "message": msg})
	}
	return true
}
