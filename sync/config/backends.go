package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// parseBackends reads "PORT=BACKEND,..." where PORT is a Service port name or number.
func parseBackends(spec string) ([]desired.PortBackend, error) {
	var out []desired.PortBackend
	seenPort, seenBackend := map[string]bool{}, map[string]bool{}
	for _, item := range splitList(spec) {
		port, backend, ok := strings.Cut(item, "=")
		port, backend = strings.TrimSpace(port), strings.TrimSpace(backend)
		if !ok || port == "" || backend == "" {
			return nil, fmt.Errorf("%q is not PORT=BACKEND", short(item))
		}
		if n, err := strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
			return nil, fmt.Errorf("%q: port %d out of range", short(item), n)
		}
		if seenPort[port] || seenBackend[backend] {
			return nil, errors.New("each port and each backend may appear once")
		}
		seenPort[port], seenBackend[backend] = true, true
		out = append(out, desired.PortBackend{Port: port, Backend: backend})
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
