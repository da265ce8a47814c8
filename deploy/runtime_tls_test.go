package deploy

import (
	"os/exec"
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// tlsMounted checks that the service's TLS files for tls:// runtime URLs
// (HAPROXY_RUNTIME_TLS_CA, _CERT, _KEY) are the Secret's keys ca.crt,
// tls.crt and tls.key, mounted from secret.
func tlsMounted(t *testing.T, objs map[string]object, secret string) {
	t.Helper()
	cm := decode[corev1.ConfigMap](t, objs["ConfigMap"]).Data
	dep := decode[appsv1.Deployment](t, objs["Deployment"])
	var dir string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == v.Name && m.ReadOnly {
					dir = m.MountPath
				}
			}
		}
	}
	if dir == "" {
		t.Fatalf("the Secret %s is not mounted read-only: %+v", secret, dep.Spec.Template.Spec)
	}
	for k, file := range map[string]string{"HAPROXY_RUNTIME_TLS_CA": "ca.crt", "HAPROXY_RUNTIME_TLS_CERT": "tls.crt", "HAPROXY_RUNTIME_TLS_KEY": "tls.key"} {
		if cm[k] != path.Join(dir, file) {
			t.Errorf("%s = %q, want %s", k, cm[k], path.Join(dir, file))
		}
	}
}

// TestChartRuntimeTLS: with tls:// runtime URLs the chart mounts
// haproxy.runtimeTLS.secretName and names its files; it refuses tls://
// without the Secret (the service would not start) and the Secret without
// tls:// (the sockets would be reached in clear).
func TestChartRuntimeTLS(t *testing.T) {
	tlsArgs := []string{"--set", "haproxy.dataplaneURL=http://lb-a:5555\\,http://lb-b:5555",
		"--set", "haproxy.runtimeURL=tls://lb-a:9999\\,tls://lb-b:9999", "--set", "haproxy.runtimeTLS.secretName=lb-admin-tls",
		"--set", "haproxy.runtimeTLS.serverName=haproxy.internal"}
	objs := byKind(t, helm(t, tlsArgs...))
	tlsMounted(t, objs, "lb-admin-tls")
	if cm := decode[corev1.ConfigMap](t, objs["ConfigMap"]).Data; cm["HAPROXY_RUNTIME_TLS_SERVER_NAME"] != "haproxy.internal" {
		t.Errorf("HAPROXY_RUNTIME_TLS_SERVER_NAME = %q", cm["HAPROXY_RUNTIME_TLS_SERVER_NAME"])
	}
	for name, args := range map[string][]string{
		"tls:// without a Secret":      {"--set", "haproxy.dataplaneURL=http://lb-a:5555", "--set", "haproxy.runtimeURL=tls://lb-a:9999"},
		"a Secret without tls://":      {"--set", "haproxy.dataplaneURL=http://lb-a:5555", "--set", "haproxy.runtimeURL=tcp://lb-a:9999", "--set", "haproxy.runtimeTLS.secretName=lb-admin-tls"},
		"a server name without tls://": {"--set", "haproxy.runtimeTLS.serverName=haproxy.internal"},
	} {
		if out, err := helmRefuses(args...); err == nil || !strings.Contains(string(out), "runtimeTLS") {
			t.Errorf("%s renders (%v):\n%.300s", name, err, out)
		}
	}
	if c := renderedConfig(t); c["HAPROXY_RUNTIME_TLS_CA"] != "" || c["HAPROXY_RUNTIME_TLS_CERT"] != "" || c["HAPROXY_RUNTIME_TLS_KEY"] != "" {
		t.Errorf("default values set TLS files: %v", c)
	}
}

// TestRuntimeTLSComponent: components/runtime-tls mounts the Secret
// haproxy-k8s-sync-runtime-tls and names its files.
func TestRuntimeTLSComponent(t *testing.T) {
	dir := overlay(t, "resources:\n  - %[1]s/overlays/example\ncomponents:\n  - %[1]s/components/runtime-tls\n", ".")
	out, err := exec.Command(tool("kubectl"), "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	tlsMounted(t, byKind(t, out), "haproxy-k8s-sync-runtime-tls")
}

// TestAdminTLSListenIsTheDocumentedOne: the listen section that
// docs/drivers.md gives for the admin socket across the network is the one
// the TLS tests run on a real HAProxy (haproxytest.AdminTLSLines), with the
// page's paths.
func TestAdminTLSListenIsTheDocumentedOne(t *testing.T) {
	page := readDoc(t, "docs/drivers.md")
	want := strings.Join(haproxytest.AdminTLSLines(":9999", "/etc/haproxy/admin-tls/server.pem", "/etc/haproxy/admin-tls/ca.crt", "/run/haproxy/admin.sock"), "\n")
	if !strings.Contains(page, "\n"+want+"\n") {
		t.Errorf("docs/drivers.md lacks the tested listen section:\n%s", want)
	}
	if !strings.Contains(page, "stats socket /run/haproxy/admin.sock mode 600 level admin") {
		t.Error("docs/drivers.md lacks the unix admin socket the listen section points at")
	}
	// The HAProxy side's haproxy.cfg chroots: its relay names a socket
	// inside the chroot, the same section otherwise.
	chrooted := strings.Join(haproxytest.AdminTLSLines(":9999", "/etc/haproxy/admin-tls/server.pem", "/etc/haproxy/admin-tls/ca.crt", "/admin-relay.sock"), "\n")
	if side := readDoc(t, "docs/haproxy.md"); !strings.Contains(side, "\n"+chrooted+"\n") || !strings.Contains(side, "stats socket /var/lib/haproxy/admin-relay.sock mode 600 level admin user haproxy") {
		t.Errorf("docs/haproxy.md lacks the tested listen section with its socket inside the chroot:\n%s", chrooted)
	}
}
