package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

var allVars = []string{
	"INGRESS_NAMESPACE", "INGRESS_SERVICE_NAME", "HAPROXY_BACKEND_NAME", "HAPROXY_BACKENDS",
	"HAPROXY_BACKEND_PORT", "TARGET_ADDRESS", "HAPROXY_DATAPLANE_URL", "HAPROXY_DATAPLANE_USERNAME",
	"HAPROXY_DATAPLANE_PASSWORD", "HAPROXY_DATAPLANE_TOKEN", "HAPROXY_DATAPLANE_CA_FILE",
	"HAPROXY_RUNTIME_URL", "HAPROXY_SEND_PROXY_V2", "HAPROXY_BALANCE", "HAPROXY_CHECK_INTER",
	"HAPROXY_CHECK_RISE", "HAPROXY_CHECK_FALL", "HAPROXY_WEIGHT", "HAPROXY_DELETE_BATCH", "HAPROXY_DELETE_GUARD_PERCENT", "WEBHOOK_TOKEN", "RESYNC_PERIOD",
	"RECONCILE_TIMEOUT", "PORT", "LOG_LEVEL", "KUBECONFIG",
}

// env clears every variable, then sets the given ones, for this test only.
func env(t *testing.T, kv map[string]string) {
	t.Helper()
	for _, k := range allVars {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range kv {
		t.Setenv(k, v)
	}
}

func TestLoadDefaults(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://haproxy:5555"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "ingress-nginx" || c.Service != "ingress-nginx" || c.BackendName != "ingress-nginx" ||
		c.Target != "node" || c.Balance != "roundrobin" || c.CheckInter != 5*time.Second || c.CheckRise != 2 ||
		c.CheckFall != 2 || c.Weight != "equal" || c.DeleteBatch != 10 || c.ReconcileTimeout != 30*time.Second || c.Port != 8080 || c.LogLevel != "info" {
		t.Errorf("defaults: %+v", c)
	}
	if want := []desired.PortBackend{{Backend: "ingress-nginx"}}; !reflect.DeepEqual(c.Backends, want) {
		t.Errorf("backends = %v", c.Backends)
	}
	if len(c.Dataplanes) != 1 || c.Dataplanes[0].Host != "haproxy:5555" {
		t.Errorf("dataplanes = %v", c.Dataplanes)
	}
	o := c.Options()
	if o.Mode != desired.NodeMode || !o.Settings.TCPCheck || o.Check.Inter != 5*time.Second || o.WeightByEndpoints {
		t.Errorf("options = %+v", o)
	}
}

func TestLoadSeveralBackendsAndTargets(t *testing.T) {
	env(t, map[string]string{
		"HAPROXY_DATAPLANE_URL": "http://a:5555, https://b:5555",
		"HAPROXY_BACKENDS":      "http=be_http, 443=be_https",
		"TARGET_ADDRESS":        "pod",
		"HAPROXY_WEIGHT":        "endpoints",
	})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want := []desired.PortBackend{{Port: "http", Backend: "be_http"}, {Port: "443", Backend: "be_https"}}
	if !reflect.DeepEqual(c.Backends, want) || len(c.Dataplanes) != 2 || c.Options().Mode != desired.PodMode {
		t.Errorf("got %+v", c)
	}
}

func TestLoadRejectsBadValues(t *testing.T) {
	base := map[string]string{"HAPROXY_DATAPLANE_URL": "http://haproxy:5555"}
	tests := []struct {
		key, value string
	}{
		{"TARGET_ADDRESS", "vm"},
		{"HAPROXY_BACKENDS", "http"},
		{"HAPROXY_BACKENDS", "http=a,http=b"},
		{"HAPROXY_BACKENDS", "70000=a"},
		{"HAPROXY_DATAPLANE_URL", "haproxy:5555"},
		{"HAPROXY_DATAPLANE_URL", ""},
		{"HAPROXY_RUNTIME_URL", "/var/run/haproxy.sock"},
		{"HAPROXY_RUNTIME_URL", "unix:///a.sock,unix:///b.sock"}, // two sockets for one Data Plane URL
		{"HAPROXY_BACKEND_PORT", "70000"},
		{"HAPROXY_BACKEND_PORT", "x"},
		{"HAPROXY_CHECK_INTER", "5"},
		{"HAPROXY_CHECK_INTER", "soon"},
		{"HAPROXY_CHECK_RISE", "0"},
		{"HAPROXY_CHECK_FALL", "-1"},
		{"HAPROXY_BALANCE", "fastest"},
		{"HAPROXY_WEIGHT", "heavy"},
		{"HAPROXY_DELETE_BATCH", "0"},
		{"HAPROXY_DELETE_GUARD_PERCENT", "101"},
		{"HAPROXY_DELETE_GUARD_PERCENT", "-1"},
		{"HAPROXY_SEND_PROXY_V2", "maybe"},
		{"RESYNC_PERIOD", "-1s"},
		{"RECONCILE_TIMEOUT", "0s"},
		{"PORT", "0"},
		{"LOG_LEVEL", "trace"},
		{"HAPROXY_DATAPLANE_CA_FILE", "/nonexistent/ca.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			kv := map[string]string{}
			for k, v := range base {
				kv[k] = v
			}
			kv[tt.key] = tt.value
			env(t, kv)
			_, err := Load()
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.key+":") || strings.Contains(msg, "\n") {
				t.Errorf("error %q does not start with %s: on one line", msg, tt.key)
			}
		})
	}
}

func TestLoadBackendPortWithBackendsIsRejected(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", "HAPROXY_BACKENDS": "http=a", "HAPROXY_BACKEND_PORT": "80"})
	if _, err := Load(); err == nil || !strings.HasPrefix(err.Error(), "HAPROXY_BACKEND_PORT:") {
		t.Errorf("err = %v", err)
	}
}

func TestStringHasNoSecrets(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", "HAPROXY_DATAPLANE_PASSWORD": "s3cret-pw", "WEBHOOK_TOKEN": "tok-123"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.String(); strings.Contains(s, "s3cret-pw") || strings.Contains(s, "tok-123") {
		t.Errorf("String() leaks a secret: %s", s)
	}
}
