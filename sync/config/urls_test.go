package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestURLWithoutScheme: a URL written without its scheme is answered with
// "has no scheme" and the URL to write, not a parse error.
func TestURLWithoutScheme(t *testing.T) {
	for _, tt := range []struct {
		key, value, want string
	}{
		{"HAPROXY_DATAPLANE_URL", "haproxy:5555", `HAPROXY_DATAPLANE_URL: "haproxy:5555" has no scheme; write http://haproxy:5555 or https://haproxy:5555`},
		{"HAPROXY_DATAPLANE_URL", "127.0.0.1:5555", `HAPROXY_DATAPLANE_URL: "127.0.0.1:5555" has no scheme; write http://127.0.0.1:5555 or https://127.0.0.1:5555`},
		{"HAPROXY_DATAPLANE_URL", "http://a:5555,b:5555", `HAPROXY_DATAPLANE_URL: "b:5555" has no scheme; write http://b:5555 or https://b:5555`},
		{"HAPROXY_DATAPLANE_URL", "admin:s3cret@haproxy:5555", `HAPROXY_DATAPLANE_URL: item 1 has no scheme (not shown: it may hold credentials); write it as http://... or https://...`},
		{"HAPROXY_RUNTIME_URL", "/run/haproxy.sock", `HAPROXY_RUNTIME_URL: "/run/haproxy.sock" has no scheme; write unix:///run/haproxy.sock`},
		{"HAPROXY_RUNTIME_URL", "unix@/run/haproxy.sock", `HAPROXY_RUNTIME_URL: "/run/haproxy.sock" has no scheme; write unix:///run/haproxy.sock`},
		{"HAPROXY_RUNTIME_URL", "haproxy:9999", `HAPROXY_RUNTIME_URL: "haproxy:9999" has no scheme; write tls://haproxy:9999 (TLS with a client certificate: docs/drivers.md) or, on a trusted network only, tcp://haproxy:9999`},
		{"HAPROXY_RUNTIME_URL", "ipv4@10.0.0.10:9999", `HAPROXY_RUNTIME_URL: "ipv4@10.0.0.10:9999" has no scheme; write tls://10.0.0.10:9999 (TLS with a client certificate: docs/drivers.md) or, on a trusted network only, tcp://10.0.0.10:9999`},
	} {
		t.Run(tt.value, func(t *testing.T) {
			kv := map[string]string{tt.key: tt.value}
			if tt.key == "HAPROXY_DATAPLANE_URL" && strings.Contains(tt.value, ",") {
				kv["HAPROXY_RUNTIME_URL"] = "unix:///a.sock,unix:///b.sock"
			}
			env(t, kv)
			_, err := Load()
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v\nwant  %s", err, tt.want)
			}
		})
	}
}

// tlsEnv writes a CA and a client certificate and returns the variables of
// a tls:// runtime URL that uses them.
func tlsEnv(t *testing.T) map[string]string {
	t.Helper()
	ca := haproxytest.NewCA(t, "ca")
	dir := t.TempDir()
	haproxytest.WriteFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	cert, key := ca.Issue(t, "client", true, time.Now().Add(time.Hour)).Write(t, dir, "tls")
	return map[string]string{
		"HAPROXY_RUNTIME_URL":      "tls://haproxy-a:9999,tls://haproxy-b:9999",
		"HAPROXY_RUNTIME_TLS_CA":   filepath.Join(dir, "ca.crt"),
		"HAPROXY_RUNTIME_TLS_CERT": cert,
		"HAPROXY_RUNTIME_TLS_KEY":  key,
	}
}

// TestRuntimeTLS: tls:// needs the three files, each usable, and an error
// names the variable at fault; the files without tls:// are refused.
func TestRuntimeTLS(t *testing.T) {
	good := tlsEnv(t)
	other := tlsEnv(t)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	haproxytest.WriteFile(t, garbage, []byte("not PEM"))
	with := func(k, v string) map[string]string {
		kv := map[string]string{}
		for gk, gv := range good {
			kv[gk] = gv
		}
		if v == "" {
			delete(kv, k)
		} else {
			kv[k] = v
		}
		return kv
	}
	for _, tt := range []struct {
		name string
		kv   map[string]string
		want string // the variable the error starts with
	}{
		{"no CA", with("HAPROXY_RUNTIME_TLS_CA", ""), "HAPROXY_RUNTIME_TLS_CA"},
		{"no certificate", with("HAPROXY_RUNTIME_TLS_CERT", ""), "HAPROXY_RUNTIME_TLS_CERT"},
		{"no key", with("HAPROXY_RUNTIME_TLS_KEY", ""), "HAPROXY_RUNTIME_TLS_KEY"},
		{"a CA that is not PEM", with("HAPROXY_RUNTIME_TLS_CA", garbage), "HAPROXY_RUNTIME_TLS_CA"},
		{"a certificate that is not there", with("HAPROXY_RUNTIME_TLS_CERT", garbage+".missing"), "HAPROXY_RUNTIME_TLS_CERT"},
		{"another certificate's key", with("HAPROXY_RUNTIME_TLS_KEY", other["HAPROXY_RUNTIME_TLS_KEY"]), "HAPROXY_RUNTIME_TLS_KEY"},
		{"files with tcp://", with("HAPROXY_RUNTIME_URL", "tcp://haproxy:9999"), "HAPROXY_RUNTIME_TLS_CA"},
		{"a server name with unix://", map[string]string{"HAPROXY_RUNTIME_URL": "unix:///run/haproxy.sock", "HAPROXY_RUNTIME_TLS_SERVER_NAME": "haproxy"}, "HAPROXY_RUNTIME_TLS_SERVER_NAME"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env(t, tt.kv)
			_, err := Load()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want+":") || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line starting with %s", err, tt.want)
			}
		})
	}
	t.Run("good", func(t *testing.T) {
		env(t, good)
		c, err := Load()
		if err != nil {
			t.Fatal(err)
		}
		if c.RuntimeTLS == nil || c.RuntimeTLS.Files().Cert != good["HAPROXY_RUNTIME_TLS_CERT"] || len(c.RuntimeURLs) != 2 {
			t.Errorf("runtime TLS %+v, URLs %q", c.RuntimeTLS, c.RuntimeURLs)
		}
		if len(c.Warnings) != 0 {
			t.Errorf("warnings %q", c.Warnings)
		}
	})
}

// TestPlainTCPSocketIsWarnedAbout: an admin socket in clear across the
// network is a warning naming it; TLS, a unix socket and loopback are not.
func TestPlainTCPSocketIsWarnedAbout(t *testing.T) {
	const warn = "admin socket in clear across the network; use tls://"
	for _, tt := range []struct {
		url  string
		want []string // URLs warned about
	}{
		{"tcp://haproxy-a:9999,tcp://10.0.0.10:9999", []string{"tcp://haproxy-a:9999", "tcp://10.0.0.10:9999"}},
		{"unix:///run/haproxy.sock", nil},
		{"tcp://127.0.0.1:9999", nil},
		{"tcp://localhost:9999", nil},
		{"tcp://[::1]:9999", nil},
	} {
		t.Run(tt.url, func(t *testing.T) {
			env(t, map[string]string{"HAPROXY_RUNTIME_URL": tt.url})
			c, err := Load()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range c.Warnings {
				if strings.Contains(w, warn) {
					got = append(got, strings.TrimSuffix(strings.TrimPrefix(w, "HAPROXY_RUNTIME_URL: "), ": "+warn+" (docs/drivers.md)"))
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warned about %q, want %q (warnings %q)", got, tt.want, c.Warnings)
			}
		})
	}
	env(t, tlsEnv(t))
	if c, err := Load(); err != nil || len(c.Warnings) != 0 {
		t.Errorf("tls://: %v, warnings %q", err, c.Warnings)
	}
}
