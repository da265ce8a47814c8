package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestUnknownVariables: a variable with the service's prefixes that it does
// not read is warned about, naming the nearest one when it is a likely
// typo; Kubernetes' Service variables and others' variables are not.
func TestUnknownVariables(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want string // "" for no warning
	}{
		{"HAPROXY_DATAPLANE_URLS=http://haproxy:5555", "unknown variable HAPROXY_DATAPLANE_URLS; did you mean HAPROXY_DATAPLANE_URL?"},
		{"HAPROXY_RUNTIME_TLS_CRT=/tls/tls.crt", "unknown variable HAPROXY_RUNTIME_TLS_CRT; did you mean HAPROXY_RUNTIME_TLS_CERT?"},
		{"WEBHOOK_TOKN=x", "unknown variable WEBHOOK_TOKN; did you mean WEBHOOK_TOKEN?"},
		{"INGRESS_SERVICE=ingress", "unknown variable INGRESS_SERVICE; did you mean INGRESS_SERVICE_NAME?"},
		{"HAPROXY_BACKENDS_PORT=80", "unknown variable HAPROXY_BACKENDS_PORT; did you mean HAPROXY_BACKEND_PORT?"},
		{"RECONCILE_TIMEOUTS=1m", "unknown variable RECONCILE_TIMEOUTS; did you mean RECONCILE_TIMEOUT?"},
		{"HAPROXY_SOMETHING_ELSE_ENTIRELY=1", "unknown variable HAPROXY_SOMETHING_ELSE_ENTIRELY"},
		{"CLUSTER_ID=eu1", "unknown variable CLUSTER_ID"},
		// Under a word other software uses too, only a near miss.
		{"POD_READINESS_GATES=true", "unknown variable POD_READINESS_GATES; did you mean POD_READINESS_GATE?"},
		{"LOG_LEVL=debug", "unknown variable LOG_LEVL; did you mean LOG_LEVEL?"},
		{"POD_NAME=haproxy-k8s-sync-5d8f7", ""},
		{"POD_IP=10.244.0.7", ""},
		{"SERVICE_NAME=sync", ""},
		// Known, or not the service's.
		{"HAPROXY_DATAPLANE_URL=http://haproxy:5555", ""},
		{"PATH=/usr/bin", ""},
		{"HKS_HAPROXY=/usr/sbin/haproxy", ""},
		{"KUBECONFIG=/k", ""},
		// What Kubernetes sets for Services named haproxy and haproxy-k8s-sync.
		{"HAPROXY_SERVICE_HOST=10.96.0.10", ""},
		{"HAPROXY_SERVICE_PORT=9999", ""},
		{"HAPROXY_SERVICE_PORT_ADMIN=9999", ""},
		{"HAPROXY_PORT=tcp://10.96.0.10:9999", ""},
		{"HAPROXY_PORT_9999_TCP=tcp://10.96.0.10:9999", ""},
		{"HAPROXY_PORT_9999_TCP_PROTO=tcp", ""},
		{"HAPROXY_PORT_9999_TCP_PORT=9999", ""},
		{"HAPROXY_PORT_9999_TCP_ADDR=10.96.0.10", ""},
		{"HAPROXY_K8S_SYNC_SERVICE_HOST=10.96.0.11", ""},
		{"HAPROXY_K8S_SYNC_SERVICE_PORT_HTTP=8080", ""},
		{"HAPROXY_K8S_SYNC_PORT=tcp://10.96.0.11:8080", ""},
		{"HAPROXY_K8S_SYNC_PORT_8080_TCP_ADDR=10.96.0.11", ""},
		{"WEBHOOK_PORT_443_TCP=tcp://10.96.0.12:443", ""},
	} {
		got := unknownVariables([]string{tt.env})
		var want []string
		if tt.want != "" {
			want = []string{tt.want}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", tt.env, got, want)
		}
	}
}

// TestLoadWarnsOfAMisspeltVariable: Load's result holds the warning, also
// when the misspelling is why a required variable is missing.
func TestLoadWarnsOfAMisspeltVariable(t *testing.T) {
	t.Run("misspelt", func(t *testing.T) {
		env(t, map[string]string{"HAPROXY_DATAPLANE_URLS": "http://haproxy:5555"})
		c, err := Load()
		if err == nil || !strings.HasPrefix(err.Error(), "HAPROXY_DATAPLANE_URL:") {
			t.Errorf("err = %v, want HAPROXY_DATAPLANE_URL missing", err)
		}
		want := []string{"unknown variable HAPROXY_DATAPLANE_URLS; did you mean HAPROXY_DATAPLANE_URL?"}
		if !reflect.DeepEqual(c.Warnings, want) {
			t.Errorf("warnings %q, want %q", c.Warnings, want)
		}
	})
	t.Run("a Service's variable", func(t *testing.T) {
		env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://haproxy:5555", "HAPROXY_PORT": "tcp://10.96.0.10:5555"})
		if c, err := Load(); err != nil || len(c.Warnings) != 0 {
			t.Errorf("%v, warnings %q", err, c.Warnings)
		}
	})
}

func TestLevenshtein(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"HAPROXY_DATAPLANE_URLS", "HAPROXY_DATAPLANE_URL", 1}, {"ab", "ba", 2},
	} {
		if got := levenshtein(tt.a, tt.b); got != tt.want {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := levenshtein(tt.b, tt.a); got != tt.want {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}
