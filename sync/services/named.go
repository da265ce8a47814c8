package services

import (
	"slices"
	"strings"
)

// MaxNamedBackends bounds the backends NamedBackends reads from one annotation.
const MaxNamedBackends = 64

// NamedBackends returns the backends an annotation value names (leniently:
// the watch hands over those a Service stopped naming, before Select judges it), sorted,
// each once: the BACKEND of every PORT=BACKEND item, or the value itself
// when it is one bare name. Items that are not valid backend names are
// skipped; Select refuses such a Service, and the
// watch only needs the names to hand over those that left.
func NamedBackends(value string) []string {
	var out []string
	items := strings.Split(value, ",")
	for _, item := range items {
		item = strings.TrimSpace(item)
		backend := item
		if _, b, ok := strings.Cut(item, "="); ok {
			backend = strings.TrimSpace(b)
		} else if len(items) > 1 {
			continue // a bare name is only a single-port Service's whole value
		}
		if validBackendName(backend) && !slices.Contains(out, backend) {
			out = append(out, backend)
			if len(out) == MaxNamedBackends {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// validBackendName reports whether s can be an HAProxy proxy name: 1 to 127
// letters, digits, '-', '_', '.' or ':'.
func validBackendName(s string) bool {
	if s == "" || len(s) > 127 {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)
		if !ok {
			return false
		}
	}
	return true
}
