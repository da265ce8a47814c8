package dataplanetest

import (
	"context"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// Synthetic is the process the API reports without Options.RuntimeSocket:
// no real HAProxy has pid 1 on a test host, so it matches no socket.
const (
	SyntheticPID  = 1
	SyntheticNode = "dataplanetest"
)

// started stands for the synthetic process's start.
var started = time.Now()

// SetRuntimeSocket points the API at another real HAProxy's admin socket
// (Options.RuntimeSocket), as a Data Plane API whose own runtime socket
// now reaches another HAProxy: its process info and its runtime replays
// go there from the next request on. Empty stops both.
func (s *Server) SetRuntimeSocket(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.RuntimeSocket = path
	s.mirror = nil
	if path != "" {
		s.mirror = &mirror{sock: runtimeapi.Socket{Network: "unix", Address: path}}
	}
}

// processInfo answers GET /services/haproxy/runtime/info as the real API
// does (client-native's GetInfo, from "show info typed"): the worker that
// answers RuntimeSocket, and when it cannot be asked, 200 with the error
// field. s.mu is held.
func (s *Server) processInfo() reply {
	sock := s.opts.RuntimeSocket
	if sock == "" {
		up := int64(time.Since(started).Seconds())
		return reply{status: 200, body: map[string]any{"info": map[string]any{
			"pid": SyntheticPID, "node": SyntheticNode, "uptime": up, "version": "3.0.0"}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := runtimeapi.Socket{Network: "unix", Address: sock}.Command(ctx, "show info")
	if err != nil {
		return reply{status: 200, body: map[string]any{"error": err.Error(), "runtimeAPI": sock}}
	}
	p := runtimeapi.ParseProcessInfo(out)
	info := map[string]any{"pid": p.PID}
	if p.Node != "" {
		info["node"] = p.Node
	}
	if p.HasUptime {
		info["uptime"] = int64(p.Uptime / time.Second)
	}
	return reply{status: 200, body: map[string]any{"info": info, "runtimeAPI": sock}}
}
