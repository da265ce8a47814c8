package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// knownVariables are the variables Config reads, from its envconfig tags.
func knownVariables() []string {
	var out []string
	t := reflect.TypeOf(Config{})
	for i := range t.NumField() {
		if v := t.Field(i).Tag.Get("envconfig"); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// commonWords start variables that other software and Kubernetes' downward
// API commonly set (POD_NAME, POD_IP, SERVICE_NAME, LOG_DIR): under these
// prefixes only a near miss of a known variable is warned about.
var commonWords = map[string]bool{"POD": true, "KUBE": true, "LOG": true, "SERVICE": true, "MAX": true, "TARGET": true}

// unknownVariables warns of each variable in environ (KEY=VALUE) that
// starts with one of the service's prefixes (the first word of a known
// variable with several words: HAPROXY_, WEBHOOK_, ...) but is none of its
// variables, naming the nearest known one when it is close: a misspelt
// variable is otherwise ignored in silence, and its default used. Names
// Kubernetes sets for Services are left out (serviceLink).
func unknownVariables(environ []string) []string {
	known := knownVariables()
	prefixes := map[string]bool{}
	for _, k := range known {
		if first, _, ok := strings.Cut(k, "_"); ok {
			prefixes[first] = true
		}
	}
	var out []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		first, _, ok := strings.Cut(name, "_")
		if !ok || !prefixes[first] || slices.Contains(known, name) || serviceLink(name, value) {
			continue
		}
		msg := "unknown variable " + name
		near := nearest(name, known)
		if near != "" {
			msg += "; did you mean " + near + "?"
		} else if commonWords[first] {
			continue
		}
		out = append(out, msg)
	}
	slices.Sort(out) // environ's order is the process's, not the reader's
	return out
}

// Kubernetes gives every container variables for each Service of its
// namespace (enableServiceLinks, docker-link style): a Service named
// haproxy gives HAPROXY_SERVICE_HOST, HAPROXY_SERVICE_PORT[_NAME],
// HAPROXY_PORT=tcp://10.0.0.1:9999 and HAPROXY_PORT_9999_TCP[_PROTO|_PORT|_ADDR].
var (
	serviceVar  = regexp.MustCompile(`^[A-Z0-9_]+_SERVICE_(HOST|PORT(_[A-Z0-9_]+)?)$`)
	portVar     = regexp.MustCompile(`^[A-Z0-9_]+_PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$`)
	portAddress = regexp.MustCompile(`^(tcp|udp|sctp)://`)
)

// serviceLink reports whether name=value is one of the variables
// Kubernetes sets for a Service. NAME_PORT alone counts only with a value
// like tcp://10.0.0.1:80, so that a misspelt HAPROXY_BACKENDS_PORT=80 is
// still warned about.
func serviceLink(name, value string) bool {
	if serviceVar.MatchString(name) || portVar.MatchString(name) {
		return true
	}
	return strings.HasSuffix(name, "_PORT") && portAddress.MatchString(value)
}

// nearest returns the known name closest to name by edit distance, when
// the distance is small enough to be a typo (at most 3, and under a
// quarter of the name), else the one known name that name is the first
// words of (INGRESS_SERVICE: INGRESS_SERVICE_NAME), else "".
func nearest(name string, known []string) string {
	var longer []string
	for _, k := range known {
		if strings.HasPrefix(k, name+"_") {
			longer = append(longer, k)
		}
	}
	best, bestD := "", 0
	for _, k := range known {
		if d := levenshtein(name, k); best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	switch {
	case best != "" && bestD <= 3 && bestD*4 < len(name):
		return best
	case len(longer) == 1:
		return longer[0]
	}
	return ""
}

// levenshtein is the number of single-byte insertions, deletions and
// substitutions that turn a into b (variable names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Variables are the variables the service reads, as help lists them.
func Variables() []string { return knownVariables() }
