package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// allVars are every variable Config reads, from its envconfig tags.
var allVars = func() []string {
	var out []string
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		if v := ct.Field(i).Tag.Get("envconfig"); v != "" {
			out = append(out, v)
		}
	}
	return out
}()

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
		c.Target != "node" || c.Balance != "" || c.CheckInter != 1500*time.Millisecond || c.CheckRise != 2 ||
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
	// Steady checks every 1.5s, fast ones while a server is DOWN or changing,
	// and real connections observed: the shipped timing (README "Checks").
	wantCheck := model.Check{Inter: 1500 * time.Millisecond, FastInter: 100 * time.Millisecond, DownInter: 200 * time.Millisecond,
		Rise: 2, Fall: 2, OnError: "sudden-death"}
	if o.Check != wantCheck || ShippedCheck() != wantCheck {
		t.Errorf("check = %+v, shipped %+v, want %+v", o.Check, ShippedCheck(), wantCheck)
	}
	if o.Mode != desired.NodeMode || o.Settings != (model.Settings{}) || o.WeightByEndpoints {
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
	missing := filepath.Join(t.TempDir(), "missing")
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
		{"HAPROXY_CHECK_FASTINTER", "0s"},
		{"HAPROXY_CHECK_DOWNINTER", "fast"},
		{"HAPROXY_CHECK_ON_ERROR", "reboot"},
		{"HAPROXY_CHECK_RISE", "0"},
		{"HAPROXY_CHECK_FALL", "-1"},
		{"HAPROXY_BALANCE", "fastest"},
		{"HAPROXY_WEIGHT", "heavy"},
		{"POD_READINESS_GATE", "true"}, // node mode: a Node's server stands for many pods
		{"POD_READINESS_GATE", "maybe"},
		{"HAPROXY_CHECK_KUBE_PROXY_PORT", "70000"},
		{"HAPROXY_CHECK_KUBE_PROXY_PORT", "x"},
		{"HAPROXY_CHECK_KUBE_PROXY_PORT", "10256"}, // no HTTP check: HAPROXY_BALANCE is empty
		{"HAPROXY_CHECK_HEALTH_NODE_PORT", "yes"},
		{"SERVICE_EVENTS", "maybe"},
		{"HAPROXY_DELETE_BATCH", "0"},
		{"HAPROXY_DELETE_GUARD_PERCENT", "101"},
		{"HAPROXY_DELETE_GUARD_PERCENT", "-1"},
		{"HAPROXY_SEND_PROXY_V2", "maybe"},
		{"RESYNC_PERIOD", "-1s"},
		{"RECONCILE_TIMEOUT", "0s"},
		{"PORT", "0"},
		{"LOG_LEVEL", "trace"},
		{"HAPROXY_DATAPLANE_CA_FILE", filepath.Join(missing, "ca.pem")},
		{"CLUSTER_NAME", "blue green"},
		{"CLUSTER_NAME", "a-very-long-cluster-name-indeed"},
		{"CLUSTER_NAME", "eu1-"},
		{"HAPROXY_LOCAL_ZONE", "eu west"},
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

// TestReadinessGateNeedsTheSocket: the Data Plane API alone cannot show
// check results, so a gate could never turn True.
func TestReadinessGateNeedsTheSocket(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://haproxy:5555", "TARGET_ADDRESS": "pod", "POD_READINESS_GATE": "true"})
	_, err := Load()
	if err == nil || !strings.HasPrefix(err.Error(), "POD_READINESS_GATE:") || !strings.Contains(err.Error(), "HAPROXY_RUNTIME_URL") {
		t.Fatalf("err = %v, want POD_READINESS_GATE: naming HAPROXY_RUNTIME_URL", err)
	}
	for _, kv := range []map[string]string{
		{"HAPROXY_DATAPLANE_URL": "http://haproxy:5555", "HAPROXY_RUNTIME_URL": "unix:///run/haproxy.sock"},
		{"HAPROXY_RUNTIME_URL": "unix:///run/haproxy.sock"},
	} {
		kv["TARGET_ADDRESS"], kv["POD_READINESS_GATE"] = "pod", "true"
		env(t, kv)
		if _, err := Load(); err != nil {
			t.Errorf("%v: %v", kv, err)
		}
	}
}

func TestLoadBackendPortWithBackendsIsRejected(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", "HAPROXY_BACKENDS": "http=a", "HAPROXY_BACKEND_PORT": "80"})
	if _, err := Load(); err == nil || !strings.HasPrefix(err.Error(), "HAPROXY_BACKEND_PORT:") {
		t.Errorf("err = %v", err)
	}
}

func TestStringHasNoSecrets(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", "HAPROXY_DATAPLANE_PASSWORD": "s3cret-pw", "WEBHOOK_TOKEN": "tok-123-0123456789"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.String(); strings.Contains(s, "s3cret-pw") || strings.Contains(s, "tok-123") {
		t.Errorf("String() leaks a secret: %s", s)
	}
}

func TestWebhookAuth(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-a-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	placeholderFile := filepath.Join(t.TempDir(), "placeholder")
	missingFile := filepath.Join(t.TempDir(), "missing")
	if err := os.WriteFile(placeholderFile, []byte("changeme-changeme-changeme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555"}
	cases := []struct {
		name    string
		env     map[string]string
		mode    string // "" with wantErr
		wantErr string // prefix of Load's error
	}{
		{"nothing chosen", nil, "", ""},
		{"a token", map[string]string{"WEBHOOK_TOKEN": "  0123456789abcdef \n"}, AuthToken, ""},
		{"a token file", map[string]string{"WEBHOOK_TOKEN_FILE": tokenFile}, AuthToken, ""},
		{"a short token", map[string]string{"WEBHOOK_TOKEN": "short-secret"}, "", "WEBHOOK_TOKEN: the token has 12 characters"},
		// deploy/secret.example.yaml's placeholder, and the like: long
		// enough, but public.
		{"the example's placeholder", map[string]string{"WEBHOOK_TOKEN": "replace-with-openssl-rand-hex-24"}, "", "WEBHOOK_TOKEN: the token is a placeholder"},
		{"a change-me token", map[string]string{"WEBHOOK_TOKEN": "Change_Me_0123456789"}, "", "WEBHOOK_TOKEN: the token is a placeholder"},
		{"a placeholder in the token file", map[string]string{"WEBHOOK_TOKEN_FILE": placeholderFile}, "", "WEBHOOK_TOKEN_FILE: the token is a placeholder"},
		{"both token and file", map[string]string{"WEBHOOK_TOKEN": "0123456789abcdef", "WEBHOOK_TOKEN_FILE": tokenFile}, "", "WEBHOOK_TOKEN_FILE:"},
		{"a missing token file", map[string]string{"WEBHOOK_TOKEN_FILE": missingFile}, "", "WEBHOOK_TOKEN_FILE:"},
		{"token mode without a token", map[string]string{"WEBHOOK_AUTH": "token"}, "", "WEBHOOK_AUTH:"},
		{"kubernetes", map[string]string{"WEBHOOK_AUTH": "kubernetes", "WEBHOOK_ALLOWED_SERVICEACCOUNTS": "ingress-nginx/cron, knative-eventing/oidc"}, AuthKubernetes, ""},
		// Any pod's ServiceAccount can be given a token for any audience:
		// the default one, with nobody listed, would let anyone in who may
		// create a pod.
		{"kubernetes, default audience, nobody listed", map[string]string{"WEBHOOK_AUTH": "kubernetes"}, "", "WEBHOOK_ALLOWED_SERVICEACCOUNTS:"},
		{"kubernetes, an audience of its own", map[string]string{"WEBHOOK_AUTH": "kubernetes", "WEBHOOK_AUDIENCE": "serving.knative.dev/service/ns/sync"}, AuthKubernetes, ""},
		{"kubernetes and a token", map[string]string{"WEBHOOK_AUTH": "kubernetes", "WEBHOOK_TOKEN": "0123456789abcdef"}, "", "WEBHOOK_TOKEN:"},
		{"kubernetes without audience", map[string]string{"WEBHOOK_AUTH": "kubernetes", "WEBHOOK_AUDIENCE": ""}, "", "WEBHOOK_AUDIENCE:"},
		{"a bad ServiceAccount", map[string]string{"WEBHOOK_AUTH": "kubernetes", "WEBHOOK_ALLOWED_SERVICEACCOUNTS": "cron"}, "", "WEBHOOK_ALLOWED_SERVICEACCOUNTS:"},
		{"ServiceAccounts without kubernetes", map[string]string{"WEBHOOK_TOKEN": "0123456789abcdef", "WEBHOOK_ALLOWED_SERVICEACCOUNTS": "a/b"}, "", "WEBHOOK_ALLOWED_SERVICEACCOUNTS:"},
		{"none", map[string]string{"WEBHOOK_AUTH": "none"}, AuthNone, ""},
		{"an unknown mode", map[string]string{"WEBHOOK_AUTH": "oauth"}, "", "WEBHOOK_AUTH:"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			kv := maps.Clone(base)
			maps.Copy(kv, tt.env)
			env(t, kv)
			c, err := Load()
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("err = %v, want %q...", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.WebhookAuth != tt.mode {
				t.Errorf("mode %q, want %q", c.WebhookAuth, tt.mode)
			}
			req := c.RequireWebhookAuth()
			if (tt.mode == "") != (req != nil) {
				t.Errorf("RequireWebhookAuth = %v", req)
			}
			if req != nil && (!strings.Contains(req.Error(), "WEBHOOK_TOKEN") || !strings.Contains(req.Error(), "WEBHOOK_AUTH") || strings.Contains(req.Error(), "\n")) {
				t.Errorf("RequireWebhookAuth's one line must name WEBHOOK_TOKEN and WEBHOOK_AUTH: %v", req)
			}
			if tt.mode == AuthToken && len(c.WebhookToken) < 16 || strings.ContainsAny(c.WebhookToken, " \n") {
				t.Errorf("token %q not trimmed", c.WebhookToken)
			}
		})
	}
}

// TestURLCredentials: credentials in a URL are refused, with a message that
// does not show the password, even when the URL cannot be parsed.
func TestURLCredentials(t *testing.T) {
	for name, kv := range map[string]map[string]string{
		"in a Data Plane URL":        {"HAPROXY_DATAPLANE_URL": "http://admin:pw-in-url-123@h:5555"},
		"in a malformed URL":         {"HAPROXY_DATAPLANE_URL": "http://admin:pw-in-url-123@h:55 55/%zz"},
		"in a runtime URL":           {"HAPROXY_RUNTIME_URL": "tcp://admin:pw-in-url-123@h:9999"},
		"in a malformed runtime URL": {"HAPROXY_RUNTIME_URL": "tcp://admin:pw-in-url-123@[h"},
	} {
		t.Run(name, func(t *testing.T) {
			env(t, kv)
			_, err := Load()
			if err == nil || strings.Contains(err.Error(), "pw-in-url") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestErrorsQuoteLittleOfTheInput: a huge bad value is not echoed whole.
func TestErrorsQuoteLittleOfTheInput(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for _, v := range []string{"TARGET_ADDRESS", "HAPROXY_BALANCE", "LOG_LEVEL", "WEBHOOK_AUTH", "HAPROXY_CHECK_RISE", "HAPROXY_BACKENDS"} {
		env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", v: huge})
		_, err := Load()
		if err == nil || len(err.Error()) > 400 {
			t.Errorf("%s: error of %d bytes", v, len(fmt.Sprint(err)))
		}
	}
}

// TestParseErrorsSayWhatToWrite: a value of the wrong type is answered in an
// operator's words, with an example, never with a Go type name.
func TestParseErrorsSayWhatToWrite(t *testing.T) {
	for _, tt := range []struct{ key, value, want string }{
		{"RESYNC_PERIOD", "5", `RESYNC_PERIOD: "5" is not a duration; write e.g. 5m or 30s`},
		{"RECONCILE_TIMEOUT", "30", `RECONCILE_TIMEOUT: "30" is not a duration; write e.g. 5m or 30s`},
		{"HAPROXY_CHECK_RISE", "zero", `HAPROXY_CHECK_RISE: "zero" is not a whole number; write e.g. 3`},
		{"PORT", "80.5", `PORT: "80.5" is not a whole number`},
		{"WATCH", "yes", `WATCH: "yes" is not true or false`},
		{"HAPROXY_SEND_PROXY_V2", "on", `HAPROXY_SEND_PROXY_V2: "on" is not true or false`},
	} {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", tt.key: tt.value})
			_, err := Load()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to start with %s", err, tt.want)
			}
			if msg := err.Error(); strings.Contains(msg, "time.Duration") || strings.Contains(msg, " int") || strings.Contains(msg, " bool") {
				t.Errorf("err %q names a Go type", msg)
			}
		})
	}
}

// TestAllowedCIDRsRefuseHostBits: 10.0.0.1/8 is refused with the network it
// would mean, not silently widened to 10.0.0.0/8.
func TestAllowedCIDRsRefuseHostBits(t *testing.T) {
	for _, tt := range []struct {
		value, err string
		allowed    []string
	}{
		{"10.0.0.1/8", `ALLOWED_SERVER_CIDRS: "10.0.0.1/8" has host bits set; write the network 10.0.0.0/8 (or 10.0.0.1/32 for the one address)`, nil},
		{"10.0.0.0/8, fd00::1/64", `ALLOWED_SERVER_CIDRS: "fd00::1/64" has host bits set; write the network fd00::/64 (or fd00::1/128 for the one address)`, nil},
		{"10.0.0.0/8,192.168.1.7/32", "", []string{"10.0.0.0/8", "192.168.1.7/32"}},
	} {
		t.Run(tt.value, func(t *testing.T) {
			env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555", "ALLOWED_SERVER_CIDRS": tt.value})
			c, err := Load()
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(c.Allowed); got != fmt.Sprint(tt.allowed) {
				t.Errorf("allowed = %s, want %s", got, tt.allowed)
			}
		})
	}
}

// TestStringIsReadable: the start-up line names backends as an operator
// writes them, and nothing only serve does.
func TestStringIsReadable(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HAPROXY_DATAPLANE_URL": "http://h:5555"},
			"service=ingress-nginx/ingress-nginx backends=ingress-nginx target=node dataplanes=1 runtime=0"},
		{map[string]string{"HAPROXY_DATAPLANE_URL": "http://a:5555,http://b:5555", "HAPROXY_BACKENDS": "http=be_http,https=be_https", "TARGET_ADDRESS": "pod"},
			"service=ingress-nginx/ingress-nginx backends=http=be_http,https=be_https target=pod dataplanes=2 runtime=0"},
		{map[string]string{"HAPROXY_RUNTIME_URL": "unix:///run/admin.sock", "HAPROXY_BACKEND_NAME": "be"},
			"service=ingress-nginx/ingress-nginx backends=be target=node dataplanes=0 runtime=1"},
	} {
		env(t, tt.env)
		c, err := Load()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestLoadForPlanNeedsNoHAProxy: a dry run from manifests needs no HAProxy
// URL; Load still does.
func TestLoadForPlanNeedsNoHAProxy(t *testing.T) {
	env(t, nil)
	if _, err := Load(); err == nil || !strings.HasPrefix(err.Error(), "HAPROXY_DATAPLANE_URL:") {
		t.Errorf("Load: err = %v", err)
	}
	c, err := LoadForPlan()
	if err != nil || len(c.Dataplanes) != 0 || len(c.RuntimeURLs) != 0 {
		t.Errorf("LoadForPlan: %+v, %v", c, err)
	}
	env(t, map[string]string{"TARGET_ADDRESS": "vm"})
	if _, err := LoadForPlan(); err == nil || !strings.HasPrefix(err.Error(), "TARGET_ADDRESS:") {
		t.Errorf("LoadForPlan still validates: err = %v", err)
	}
}

// TestClusterAndZone: CLUSTER_NAME prefixes the servers and says so at
// start; unset, nothing changes.
func TestClusterAndZone(t *testing.T) {
	env(t, map[string]string{"HAPROXY_RUNTIME_URL": "unix:///a.sock", "CLUSTER_NAME": "eu1", "HAPROXY_LOCAL_ZONE": "eu-west-1a"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	if o.NamePrefix != "eu1-" || o.LocalZone != "eu-west-1a" {
		t.Errorf("options: prefix %q zone %q", o.NamePrefix, o.LocalZone)
	}
	if s := c.String(); !strings.HasSuffix(s, " cluster=eu1 localZone=eu-west-1a") {
		t.Errorf("String() = %q", s)
	}
	if got := c.Owns(); !strings.Contains(got, "eu1-*") {
		t.Errorf("Owns() = %q", got)
	}
	env(t, map[string]string{"HAPROXY_RUNTIME_URL": "unix:///a.sock"})
	c, err = Load()
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Options(); o.NamePrefix != "" || o.LocalZone != "" || strings.Contains(c.String(), "cluster") {
		t.Errorf("unset: %+v %q", o, c.String())
	}
}
