package dataplanetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// mirror replays on a real HAProxy what the real API applies at runtime
// (dataplaneapi v3.3.0 handlers/runtime.go and runtime_server.go), so tests
// can check HAProxy's own state. Changes that reload are not mirrored: a test
// using the mirror expects none, and checks the reload count.
type mirror struct {
	sock runtimeapi.Socket
	// major, minor are HAProxy's version, read once (0, 0 until then).
	major, minor int
}

// enabledKeyword says whether the real API adds "enabled" to a runtime add
// of a server whose maintenance is disabled: only below HAProxy 3.0
// (dataplaneapi v3.3.0 SerializeRuntimeAddServer). From 3.0 on it sends
// nothing, and HAProxy adds the server in maintenance (conformance table
// v3.3.0-haproxy-3.0.11: admin state 1 after a 201).
func (m *mirror) enabledKeyword() bool {
	if m.major == 0 {
		info, err := m.sock.Command(context.Background(), "show info")
		if err != nil {
			return true
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(l, "Version: "); ok {
				_, _ = fmt.Sscanf(v, "%d.%d", &m.major, &m.minor)
			}
		}
	}
	return m.major < 3
}

// add sends "add server" the way the real API serializes a runtime add: the
// "disabled" keyword for maintenance enabled, "enabled" for disabled below
// HAProxy 3.0.
func (m *mirror) add(backend string, s models.Server) error {
	line := fmt.Sprintf("add server %s/%s %s", backend, s.Name, serverKeywords(s))
	switch s.Maintenance {
	case "enabled":
		line += " disabled"
	case "disabled":
		if m.enabledKeyword() {
			line += " enabled"
		}
	}
	return m.expect(line, "New server registered.")
}

// serverKeywords renders a server's address and the keywords the real API
// writes for the fields this service manages, as both haproxy.cfg and "add
// server" take them (maintenance apart: each says it its own way), backup
// included.
func serverKeywords(s models.Server) string {
	var b strings.Builder
	b.WriteString(s.Address)
	if s.Port != nil {
		fmt.Fprintf(&b, ":%d", *s.Port)
	}
	if s.Check == "enabled" {
		b.WriteString(" check")
	}
	for _, kv := range []struct {
		k string
		v *int64
	}{{"inter", s.Inter}, {"fastinter", s.Fastinter}, {"downinter", s.Downinter}, {"rise", s.Rise}, {"fall", s.Fall}, {"weight", s.Weight}, {"port", s.HealthCheckPort}} {
		if kv.v != nil {
			fmt.Fprintf(&b, " %s %d", kv.k, *kv.v)
		}
	}
	if s.Observe != "" {
		fmt.Fprintf(&b, " observe %s", s.Observe)
	}
	if s.ErrorLimit != 0 {
		fmt.Fprintf(&b, " error-limit %d", s.ErrorLimit)
	}
	if s.OnError != "" {
		fmt.Fprintf(&b, " on-error %s", s.OnError)
	}
	if s.SendProxyV2 == "enabled" {
		b.WriteString(" send-proxy-v2")
	}
	if s.CheckSendProxy == "enabled" {
		b.WriteString(" check-send-proxy")
	}
	// As client-native v6.3.0 serializes it (configuration/server.go).
	// HAProxy takes backup only here, when a server is added: changing it
	// on one that exists is a reload (configOp).
	switch s.Backup {
	case "enabled":
		b.WriteString(" backup")
	case "disabled":
		b.WriteString(" no-backup")
	}
	return b.String()
}

// update sends what the real API sends for a runtime-safe server change.
func (m *mirror) update(backend string, old, s models.Server) error {
	srv := backend + "/" + s.Name
	if !eqInt(old.Weight, s.Weight) && s.Weight != nil {
		if err := m.expect(fmt.Sprintf("set server %s weight %d", srv, *s.Weight), ""); err != nil {
			return err
		}
	}
	if old.Address != s.Address || !eqInt(old.Port, s.Port) {
		port := int64(0)
		if s.Port != nil {
			port = *s.Port
		}
		// HAProxy 3.0 answers a port-only change "port changed ..."
		// (conformance table v3.3.0-haproxy-3.0.11: 200, no reload).
		if err := m.expect(fmt.Sprintf("set server %s addr %s port %d", srv, s.Address, port), "IP changed|no need to change|port changed|nothing changed"); err != nil {
			return err
		}
	}
	if old.Maintenance != s.Maintenance {
		state := "ready"
		if s.Maintenance == "enabled" {
			state = "maint"
		}
		return m.expect("set server "+srv+" state "+state, "")
	}
	return nil
}

// expect sends cmd; the reply must be empty (want "") or start with one of
// the |-separated prefixes.
func (m *mirror) expect(cmd, want string) error {
	reply, err := m.sock.Command(context.Background(), cmd)
	if err != nil {
		return err
	}
	reply = strings.TrimSpace(reply)
	if want == "" && reply == "" {
		return nil
	}
	for _, p := range strings.Split(want, "|") {
		if p != "" && strings.HasPrefix(reply, p) {
			return nil
		}
	}
	return fmt.Errorf("haproxy: %q: %s", cmd, reply)
}

func eqInt(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// states reads the backend's servers from HAProxy's "show servers state"
// (format 1: field 2 id, 3 name, 4 address, 5 operational state, 6 admin state,
// 18 port), as the real API's runtime server list does.
func (m *mirror) states(backend string) ([]models.RuntimeServer, error) {
	reply, err := m.sock.Command(context.Background(), "show servers state "+backend)
	if err != nil {
		return nil, err
	}
	var out []models.RuntimeServer
	for _, line := range strings.Split(reply, "\n") {
		f := strings.Fields(line)
		if len(f) < 19 || f[1] != backend {
			continue
		}
		op, _ := strconv.Atoi(f[5])
		admin, _ := strconv.Atoi(f[6])
		port, _ := strconv.ParseInt(f[18], 10, 64)
		rs := models.RuntimeServer{ID: f[2], Name: f[3], Address: f[4], Port: &port, AdminState: "ready", OperationalState: "down"}
		switch {
		case admin&0x23 != 0: // forced or inherited maintenance
			rs.AdminState = "maint"
		case admin&0x18 != 0:
			rs.AdminState = "drain"
		}
		switch op {
		case 2:
			rs.OperationalState = "up"
		case 3:
			rs.OperationalState = "stopping"
		}
		out = append(out, rs)
	}
	return out, nil
}
