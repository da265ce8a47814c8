package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// docFence returns the body of the fenced block right after marker in a
// page of docs/.
func docFence(t *testing.T, page, marker string) string {
	t.Helper()
	_, after, ok := strings.Cut(readDoc(t, page), marker+"\n```")
	if !ok {
		t.Fatalf("%s: no fenced block right after %q", page, marker)
	}
	_, body, _ := strings.Cut(after, "\n")
	body, _, ok = strings.Cut(body, "```")
	if !ok {
		t.Fatalf("%s: the block after %q is not closed", page, marker)
	}
	return body
}

// packagedEnv is the Debian package's environment file, as systemd reads it.
func packagedEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../hack/deb/files/haproxy-k8s-sync.default")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)=(.*)$`).FindAllStringSubmatch(string(b), -1) {
		env[m[1]] = m[2]
	}
	return env
}

// TestHAProxyHostPath follows docs/install.md's path for the HAProxy host
// against the real API server: deploy/overlays/haproxy-host applied as a
// user's copy in another namespace, its token Secret filled (by the test:
// envtest runs no token controller), the page's kubeconfig commands run as
// written; then the service's reconcile, with the Debian package's
// environment file and that kubeconfig, plans the Service's Nodes into a
// real HAProxy's backends through its unix socket. The kubeconfig is the
// ServiceAccount's (it may not read Secrets), and it is the token file that
// authenticates.
func TestHAProxyHostPath(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	const ns = "haproxy-host"
	namespace(t, ns)

	// The user's copy of the overlay, with their namespace.
	text, err := os.ReadFile("overlays/haproxy-host/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied := strings.Replace(strings.Replace(string(text), "namespace: ingress-nginx\n", "namespace: "+ns+"\n", 1), "../../rbac", "%s/rbac", 1)
	dir := overlay(t, copied, ".")
	token, err := os.ReadFile("overlays/haproxy-host/token.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token.yaml"), token, 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, nil, "apply", "-k", dir)
	t.Cleanup(func() {
		_ = api.client.RbacV1().ClusterRoleBindings().Delete(ctx, "haproxy-k8s-sync-nodes-"+ns, metav1.DeleteOptions{})
	})
	// What the token controller does: a token of the ServiceAccount.
	tok := strings.TrimSpace(kubectl(t, nil, "-n", ns, "create", "token", "haproxy-k8s-sync"))
	kubectl(t, nil, "-n", ns, "patch", "secret", "haproxy-k8s-sync-token", "--type=merge", "-p", `{"stringData":{"token":"`+tok+`"}}`)

	// The followed Service: its name is the overlay's Role's, its ports the
	// package's HAPROXY_BACKENDS'.
	nodes := []string{ns + "-a", ns + "-b"}
	for i, n := range nodes {
		node, err := api.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}) })
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2." + string(rune('1'+i))}}
		if _, err := api.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ingress-nginx"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	http, https, p80, p443 := "http", "https", int32(80), int32(443)
	if _, err := api.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "ingress-nginx-1", Labels: map[string]string{discoveryv1.LabelServiceName: "ingress-nginx"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &http, Port: &p80}, {Name: &https, Port: &p443}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: &nodes[0], Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.244.2.5"}, NodeName: &nodes[1], Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The page's commands, as written but for the namespace and the
	// directory that stands for /etc/haproxy-k8s-sync on the host.
	host := t.TempDir()
	script := docFence(t, "docs/install.md", "<!-- kubeconfig: run by TestHAProxyHostPath -->")
	if !strings.HasPrefix(script, "ns=ingress-nginx\n") {
		t.Fatalf("the kubeconfig commands do not start with ns=ingress-nginx:\n%s", script)
	}
	script = strings.ReplaceAll("ns="+ns+strings.TrimPrefix(script, "ns=ingress-nginx"), "/etc/haproxy-k8s-sync/", host+"/")
	root, _ := filepath.Abs("..")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = host
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+api.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the kubeconfig commands: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(host, "kubeconfig")
	can := func(args ...string) string {
		out, _ := exec.Command(tool("kubectl"), append([]string{"--kubeconfig", kubeconfig, "auth", "can-i"}, args...)...).Output()
		return strings.TrimSpace(string(out))
	}
	if got := can("list", "endpointslices"); got != "yes" {
		t.Errorf("the kubeconfig may not list EndpointSlices: %q", got)
	}
	if got := can("get", "secrets"); got != "no" {
		t.Errorf("the kubeconfig may read Secrets (%q): it is not the ServiceAccount's", got)
	}

	// The service, with the package's environment file and that kubeconfig,
	// against a real HAProxy's unix socket.
	bin := filepath.Join(t.TempDir(), "haproxy-k8s-sync")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/haproxy-k8s-sync").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	backend := func(name string) haproxytest.Backend {
		return haproxytest.Backend{Name: name, Lines: []string{"balance roundrobin", "option tcp-check"}}
	}
	h := haproxytest.Start(t, backend("ingress_http"), backend("ingress_https"))
	webhook := filepath.Join(host, "webhook-token")
	if err := os.WriteFile(webhook, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/nonexistent"}
	for k, v := range packagedEnv(t) {
		switch k {
		case "KUBECONFIG":
			v = kubeconfig
		case "INGRESS_NAMESPACE":
			v = ns
		case "HAPROXY_RUNTIME_URL":
			v = h.RuntimeURL()
		case "WEBHOOK_TOKEN_FILE":
			v = webhook
		}
		env = append(env, k+"="+v)
	}
	reconcile := func() (string, error) {
		c := exec.Command(bin, "reconcile", "--dry-run")
		c.Env = env
		out, err := c.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			out = append(out, ee.Stderr...)
		}
		return string(out), err
	}
	out, err := reconcile()
	var res struct {
		Status  string
		Targets []struct {
			Backend string
			Add     []string
			Error   string
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Status != "planned" || len(res.Targets) != 2 {
		t.Fatalf("reconcile --dry-run: %v\n%s", err, out)
	}
	for _, tg := range res.Targets {
		slices.Sort(tg.Add)
		if !slices.Equal(tg.Add, nodes) || tg.Error != "" {
			t.Errorf("backend %s: add %q (error %q), want %q", tg.Backend, tg.Add, tg.Error, nodes)
		}
	}

	// The token file is what authenticates: another token, no access.
	if err := os.WriteFile(filepath.Join(host, "token"), []byte("not-a-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := reconcile(); err == nil || !strings.Contains(strings.ToLower(out), "unauthorized") {
		t.Errorf("with a wrong token in the token file: %v\n%s", err, out)
	}
}
