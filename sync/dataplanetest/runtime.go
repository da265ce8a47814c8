package dataplanetest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/haproxytech/client-native/v6/models"
)

// runtimeOp answers the runtime server endpoints other than the list, as
// dataplaneapi v3.3.0 handlers/runtime_server.go does: straight on
// HAProxy's runtime API, never in haproxy.cfg, no version, no reload. They
// need a mirrored HAProxy (Options.RuntimeSocket); s.mu is held.
func (s *Server) runtimeOp(op string, path map[string]string, body []byte) reply {
	backend, name := path["parent_name"], path["name"]
	if s.mirror == nil {
		return errReply(501, "%s needs a real HAProxy (Options.RuntimeSocket)", op)
	}
	find := func() (*models.RuntimeServer, error) {
		states, err := s.mirror.states(backend)
		if err != nil {
			return nil, err
		}
		for i := range states {
			if states[i].Name == name {
				return &states[i], nil
			}
		}
		return nil, nil
	}
	switch op {
	case "getRuntimeServer":
		rs, err := find()
		if err != nil {
			return errReply(500, "%v", err)
		}
		if rs == nil {
			return errReply(404, "no data for %s/%s: not found", backend, name)
		}
		return reply{status: 200, body: rs}
	case "replaceRuntimeServer":
		var want models.RuntimeServer
		if err := json.Unmarshal(body, &want); err != nil {
			return errReply(400, "%v", err)
		}
		rs, err := find()
		if err != nil {
			return errReply(500, "%v", err)
		}
		if rs == nil {
			return errReply(404, "no data for %s/%s: not found", backend, name)
		}
		srv := backend + "/" + name
		if want.OperationalState != "" && want.OperationalState != rs.OperationalState {
			if err := s.mirror.expect("set server "+srv+" health "+want.OperationalState, ""); err != nil {
				return errReply(500, "%v", err)
			}
		}
		if want.AdminState != "" && want.AdminState != rs.AdminState {
			if err := s.mirror.expect("set server "+srv+" state "+want.AdminState, ""); err != nil {
				return errReply(500, "%v", err)
			}
		}
		if rs, err = find(); err != nil || rs == nil {
			return errReply(500, "read %s after the change: %v", srv, err)
		}
		return reply{status: 200, body: rs}
	case "addRuntimeServer":
		var add models.RuntimeAddServer
		if err := json.Unmarshal(body, &add); err != nil {
			return errReply(400, "%v", err)
		}
		if add.Name == "" {
			return errReply(400, "the new server must have a name")
		}
		line := fmt.Sprintf("add server %s/%s %s", backend, add.Name, runtimeAddKeywords(add, s.mirror.enabledKeyword()))
		if err := s.mirror.expect(line, "New server registered."); err != nil {
			switch msg := err.Error(); {
			case strings.Contains(msg, "No such backend"):
				return errReply(404, "%s", msg)
			case strings.Contains(msg, "Already exists"):
				return errReply(409, "%s", msg)
			}
			return errReply(500, "%v", err)
		}
		return reply{status: 201, body: add}
	case "deleteRuntimeServer":
		rs, err := find()
		if err != nil {
			return errReply(500, "%v", err)
		}
		if rs == nil {
			return errReply(404, "no data for %s/%s: not found", backend, name)
		}
		srv := backend + "/" + name
		if rs.AdminState != "maint" {
			if err := s.mirror.expect("disable server "+srv, ""); err != nil {
				return errReply(500, "%v", err)
			}
		}
		if err := s.mirror.expect("del server "+srv, "Server deleted."); err != nil {
			return errReply(500, "%v", err)
		}
		return reply{status: 204}
	}
	return errReply(501, "operation %s is not implemented by the test server", op)
}

// runtimeAddKeywords serializes a runtime add the way the real API does
// (its SerializeRuntimeAddServer), for the fields tests send.
func runtimeAddKeywords(a models.RuntimeAddServer, enabled bool) string {
	var b strings.Builder
	b.WriteString(a.Address)
	if a.Port != nil {
		fmt.Fprintf(&b, ":%d", *a.Port)
	}
	if a.Backup == "enabled" {
		b.WriteString(" backup")
	}
	if a.Check == "enabled" {
		b.WriteString(" check")
	}
	if a.HealthCheckPort != nil {
		fmt.Fprintf(&b, " port %d", *a.HealthCheckPort)
	}
	if a.CheckSendProxy == "enabled" {
		b.WriteString(" check-send-proxy")
	}
	for _, kv := range []struct {
		k string
		v *int64
	}{{"inter", a.Inter}, {"fastinter", a.Fastinter}, {"downinter", a.Downinter}, {"rise", a.Rise}, {"fall", a.Fall}, {"weight", a.Weight}} {
		if kv.v != nil {
			fmt.Fprintf(&b, " %s %d", kv.k, *kv.v)
		}
	}
	if a.SendProxyV2 == "enabled" {
		b.WriteString(" send-proxy-v2")
	}
	switch a.Maintenance {
	case "enabled":
		b.WriteString(" disabled")
	case "disabled":
		if enabled { // below HAProxy 3.0 only (mirror.enabledKeyword)
			b.WriteString(" enabled")
		}
	}
	return b.String()
}

// SetDown says whether the server's health check fails, for the runtime
// servers answer when no real HAProxy is mirrored (with one, HAProxy says).
func (s *Server) SetDown(backend, server string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == nil {
		s.down = map[string]bool{}
	}
	s.down[backend+"/"+server] = down
}

// runtimeServers answers GET .../runtime/backends/{b}/servers as the real
// API does from HAProxy's runtime state: with a mirrored HAProxy, from its
// "show servers state"; else from the configuration, every server not in
// maintenance up unless SetDown says otherwise (checks passing).
func (s *Server) runtimeServers(backend string) reply {
	be, ok := s.cfg[backend]
	if !ok {
		return errReply(404, "backend %s does not exist", backend)
	}
	out := []models.RuntimeServer{}
	if s.mirror != nil {
		states, err := s.mirror.states(backend)
		if err != nil {
			return errReply(500, "%v", err)
		}
		for _, st := range states {
			out = append(out, st)
		}
		return reply{status: 200, body: out}
	}
	for _, srv := range be.Servers {
		rs := models.RuntimeServer{Name: srv.Name, Address: srv.Address, Port: srv.Port, AdminState: "ready", OperationalState: "up"}
		switch {
		case srv.Maintenance == "enabled":
			rs.AdminState, rs.OperationalState = "maint", "down"
		case s.down[backend+"/"+srv.Name]:
			rs.OperationalState = "down"
		}
		out = append(out, rs)
	}
	return reply{status: 200, body: out}
}
