package deploy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/tlsfiles"
)

// certManager is the cert-manager release whose CRDs the page's resources
// are checked against (its Go module ships them; fetched through the module
// proxy).
const certManager = "github.com/cert-manager/cert-manager@v1.21.2"

const certPage = "docs/certificates.md"

// pageFence returns the fenced block right after marker in page, its
// indentation (a block in a list item) removed.
func pageFence(t *testing.T, page, marker string) string {
	t.Helper()
	_, after, ok := strings.Cut(readDoc(t, page), marker+"\n")
	if !ok {
		t.Fatalf("%s has no %q", page, marker)
	}
	lines := strings.Split(after, "\n")
	fence := lines[0]
	indent := len(fence) - len(strings.TrimLeft(fence, " "))
	if !strings.HasPrefix(strings.TrimSpace(fence), "```") {
		t.Fatalf("%s: no fenced block right after %q", page, marker)
	}
	var body []string
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "```" {
			return strings.Join(body, "\n") + "\n"
		}
		body = append(body, strings.TrimPrefix(l, strings.Repeat(" ", indent)))
	}
	t.Fatalf("%s: the block after %q is not closed", page, marker)
	return ""
}

// runScript runs a page's commands in dir with bash, kubectl on PATH and
// the test API server's admin kubeconfig.
func runScript(t *testing.T, dir, script string) {
	t.Helper()
	root, _ := filepath.Abs("..")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+api.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s\n%s", err, script, out)
	}
}

// inNamespace moves a page's kubectl commands from ingress-nginx to ns.
func inNamespace(t *testing.T, script, ns string) string {
	t.Helper()
	if !strings.Contains(script, "-n ingress-nginx ") {
		t.Fatalf("the commands do not name the namespace ingress-nginx:\n%s", script)
	}
	return strings.ReplaceAll(script, "-n ingress-nginx ", "-n "+ns+" ")
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no certificate", filepath.Base(path))
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// componentSecret is the Secret components/runtime-tls mounts.
func componentSecret(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("components/runtime-tls/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`secretName: (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("components/runtime-tls mounts no Secret")
	}
	return string(m[1])
}

// sans are the names and addresses the openssl recipe puts in HAProxy's
// certificate.
func sans(t *testing.T) (dns, ips []string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^subjectAltName=(.*)$`).FindStringSubmatch(pageFence(t, certPage, "<!-- openssl: run by TestCertificatesWithOpenSSL -->"))
	if m == nil {
		t.Fatal("the openssl recipe sets no subjectAltName")
	}
	for _, s := range strings.Split(m[1], ",") {
		if v, ok := strings.CutPrefix(s, "DNS:"); ok {
			dns = append(dns, v)
		} else if v, ok := strings.CutPrefix(s, "IP:"); ok {
			ips = append(ips, v)
		}
	}
	if len(dns) == 0 || len(ips) == 0 {
		t.Fatalf("subjectAltName=%s: want a name and an address", m[1])
	}
	return dns, ips
}

// adminClient reads HAProxy's process through its TLS listener with the
// service's runtime client and the files as a mounted Secret holds them.
func adminClient(t *testing.T, addr, serverName string, files tlsfiles.Files) error {
	t.Helper()
	l, err := tlsfiles.New(files)
	if err != nil {
		return err
	}
	c, err := runtimeapi.New("tls://"+addr, model.Settings{Balance: "roundrobin", TCPCheck: true}, config.ShippedCheck(), runtimeapi.WithTLS(l, serverName))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Process(ctx)
	return err
}

// mounted writes a Secret's keys into a directory, as the kubelet mounts
// it, and returns the service's three files in it.
func mounted(t *testing.T, data map[string][]byte) tlsfiles.Files {
	t.Helper()
	dir := t.TempDir()
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tlsfiles.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
}

// TestCertificatesWithOpenSSL runs docs/certificates.md's openssl recipe as
// written, and its Secret command against the API server; checks each
// certificate; then a real HAProxy with server.pem and ca.crt behind the
// admin TLS listener lets the service's runtime client in with the
// Secret's files, and refuses a client certificate from another CA and
// HAProxy's own certificate used as a client's (no clientAuth).
func TestCertificatesWithOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	runScript(t, dir, pageFence(t, certPage, "<!-- openssl: run by TestCertificatesWithOpenSSL -->"))

	ca, server, client := readCert(t, filepath.Join(dir, "ca.crt")), readCert(t, filepath.Join(dir, "server.crt")), readCert(t, filepath.Join(dir, "client.crt"))
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("the CA: isCA %v, key usage %b", ca.IsCA, ca.KeyUsage)
	}
	dns, ips := sans(t)
	var gotIPs []string
	for _, ip := range server.IPAddresses {
		gotIPs = append(gotIPs, ip.String())
	}
	if server.IsCA || !slices.Equal(server.DNSNames, dns) || !slices.Equal(gotIPs, ips) || !slices.Equal(server.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("HAProxy's certificate: isCA %v, DNS %q, IP %q, extended key usage %v", server.IsCA, server.DNSNames, gotIPs, server.ExtKeyUsage)
	}
	if client.IsCA || !slices.Equal(client.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("the client certificate: isCA %v, extended key usage %v", client.IsCA, client.ExtKeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range append(slices.Clone(dns), ips...) {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("HAProxy's certificate for %s: %v", name, err)
		}
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate: %v", err)
	}
	serverPEM, err := os.ReadFile(filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if crt, _ := os.ReadFile(filepath.Join(dir, "server.crt")); !bytes.HasPrefix(serverPEM, crt) || !bytes.Contains(serverPEM, []byte("PRIVATE KEY")) {
		t.Error("server.pem is not HAProxy's certificate followed by its key")
	}

	// The Secret, made by the page's command, as the service mounts it.
	const ns = "certs-openssl"
	namespace(t, ns)
	secretCmd := pageFence(t, certPage, "<!-- secret: run by TestCertificatesWithOpenSSL -->")
	runScript(t, dir, inNamespace(t, secretCmd, ns))
	name := componentSecret(t)
	sec, err := api.client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the page's command made no Secret %s, which components/runtime-tls mounts: %v", name, err)
	}
	files := mounted(t, sec.Data)

	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	h := haproxytest.StartWith(t, haproxytest.Options{AdminTLS: &haproxytest.AdminTLS{ServerCert: serverPEM, ClientCA: caPEM}},
		haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin"}})
	// The listener is on 127.0.0.1: the service is told the certificate's
	// name (HAPROXY_RUNTIME_TLS_SERVER_NAME).
	if err := adminClient(t, h.AdminTLS, dns[0], files); err != nil {
		t.Fatalf("the service's client with the Secret's files: %v", err)
	}
	if err := adminClient(t, h.AdminTLS, "haproxy-b.example.internal", files); err == nil {
		t.Error("HAProxy's certificate is accepted for a name it does not carry")
	}

	other := haproxytest.NewCA(t, "another CA")
	leaf := other.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour))
	stranger := mounted(t, map[string][]byte{"ca.crt": caPEM, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
	if err := adminClient(t, h.AdminTLS, dns[0], stranger); err == nil || !strings.Contains(err.Error(), "remote error") {
		t.Errorf("a client certificate from another CA: %v, want HAProxy's refusal", err)
	}
	// HAProxy's own certificate, from the right CA but for servers only.
	serverAsClient := tlsfiles.Files{CA: files.CA, Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	if err := adminClient(t, h.AdminTLS, dns[0], serverAsClient); err == nil || !strings.Contains(err.Error(), "remote error") {
		t.Errorf("a certificate without clientAuth: %v, want HAProxy's refusal", err)
	}
}

// cmObject is the part of a cert-manager resource the page relies on.
type cmObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
		IsCA        bool     `json:"isCA"`
		SecretName  string   `json:"secretName"`
		DNSNames    []string `json:"dnsNames"`
		IPAddresses []string `json:"ipAddresses"`
		Usages      []string `json:"usages"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		IssuerRef   struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// certManagerCRDs installs cert-manager's CRDs of the kinds the page uses.
func certManagerCRDs(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", certManager).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", certManager, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", certManager, info.Error, err)
	}
	args := []string{"apply", "--server-side"}
	for _, f := range []string{"cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml"} {
		args = append(args, "-f", filepath.Join(info.Dir, "deploy", "crds", f))
	}
	kubectl(t, nil, args...)
	kubectl(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io", "crd/clusterissuers.cert-manager.io")
}

// TestCertificatesWithCertManager: the page's cert-manager resources are
// accepted by a real API server with cert-manager's CRDs; they make a CA
// from a self-signed issuer and sign with it; the client Certificate asks
// for client auth and writes the Secret components/runtime-tls and the
// chart mount; the server Certificate carries the openssl recipe's names;
// and the page's export commands, run on a Secret shaped as cert-manager
// writes one, give HAProxy files it serves the admin socket with.
func TestCertificatesWithCertManager(t *testing.T) {
	certManagerCRDs(t)
	const ns = "certs-cm"
	namespace(t, ns)
	docs := pageFence(t, certPage, "<!-- cert-manager: checked by TestCertificatesWithCertManager -->") + "---\n" +
		pageFence(t, certPage, "<!-- cert-manager server: checked by TestCertificatesWithCertManager -->")
	out := kubectl(t, []byte(docs), "apply", "--server-side", "--dry-run=server", "--field-manager=deploy-test", "-n", ns, "-f", "-")

	var objs []cmObject
	issuers := map[string]cmObject{} // by "Kind/name"
	for _, d := range strings.Split(docs, "\n---\n") {
		var o cmObject
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		if o.APIVersion != "cert-manager.io/v1" || !slices.Contains([]string{"Issuer", "ClusterIssuer", "Certificate"}, o.Kind) {
			t.Errorf("%s %s/%s: want cert-manager.io/v1 Issuer, ClusterIssuer or Certificate", o.APIVersion, o.Kind, o.Metadata.Name)
		}
		if o.Metadata.Namespace != "" {
			t.Errorf("%s/%s names its namespace: the page applies it in the service's", o.Kind, o.Metadata.Name)
		}
		if !strings.Contains(out, strings.ToLower(o.Kind)+".cert-manager.io/"+o.Metadata.Name+" serverside-applied") {
			t.Errorf("%s/%s not accepted:\n%s", o.Kind, o.Metadata.Name, out)
		}
		if o.Kind != "Certificate" {
			issuers[o.Kind+"/"+o.Metadata.Name] = o
		}
		objs = append(objs, o)
	}

	issuerOf := func(c cmObject) (cmObject, bool) {
		kind := c.Spec.IssuerRef.Kind
		if kind == "" {
			kind = "Issuer"
		}
		i, ok := issuers[kind+"/"+c.Spec.IssuerRef.Name]
		return i, ok
	}
	var caSecret string
	var client, server *cmObject
	for _, c := range objs {
		if c.Kind != "Certificate" {
			continue
		}
		i, ok := issuerOf(c)
		if !ok {
			t.Errorf("Certificate %s: issuer %s/%s is not on the page", c.Metadata.Name, c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Name)
			continue
		}
		if c.Spec.IsCA {
			if i.Spec.SelfSigned == nil {
				t.Errorf("the CA Certificate %s is issued by %s, not a self-signed issuer", c.Metadata.Name, i.Metadata.Name)
			}
			caSecret = c.Spec.SecretName
			continue
		}
		if i.Spec.CA == nil {
			t.Errorf("Certificate %s is not issued by the CA issuer", c.Metadata.Name)
		} else if i.Spec.CA.SecretName != caSecret && caSecret != "" {
			t.Errorf("the CA issuer %s signs with %s, not the CA Certificate's Secret %s", i.Metadata.Name, i.Spec.CA.SecretName, caSecret)
		}
		d, err1 := time.ParseDuration(c.Spec.Duration)
		r, err2 := time.ParseDuration(c.Spec.RenewBefore)
		if err1 != nil || err2 != nil || r <= 0 || r >= d {
			t.Errorf("Certificate %s: duration %q, renewBefore %q: want a renewal before it expires", c.Metadata.Name, c.Spec.Duration, c.Spec.RenewBefore)
		}
		switch {
		case slices.Contains(c.Spec.Usages, "client auth") && !slices.Contains(c.Spec.Usages, "server auth"):
			client = &c
		case slices.Contains(c.Spec.Usages, "server auth") && !slices.Contains(c.Spec.Usages, "client auth"):
			server = &c
		default:
			t.Errorf("Certificate %s: usages %q, want client auth or server auth", c.Metadata.Name, c.Spec.Usages)
		}
	}
	if caSecret == "" || client == nil || server == nil {
		t.Fatalf("the page lacks a CA (%q), a client or a server Certificate", caSecret)
	}

	// The client certificate's Secret is the one the service mounts.
	if want := componentSecret(t); client.Spec.SecretName != want {
		t.Errorf("the client Certificate writes %s; components/runtime-tls mounts %s", client.Spec.SecretName, want)
	}
	tlsMounted(t, byKind(t, helm(t, "--set", "haproxy.dataplaneURL=http://lb-a:5555", "--set", "haproxy.runtimeURL=tls://lb-a:9999",
		"--set", "haproxy.runtimeTLS.secretName="+client.Spec.SecretName)), client.Spec.SecretName)
	if !strings.Contains(readDoc(t, certPage), "haproxy.runtimeTLS.secretName="+client.Spec.SecretName) {
		t.Errorf("the page does not give the chart's value for %s", client.Spec.SecretName)
	}

	dns, ips := sans(t)
	if !slices.Equal(server.Spec.DNSNames, dns) || !slices.Equal(server.Spec.IPAddresses, ips) {
		t.Errorf("the server Certificate names %q %q; the openssl recipe %q %q", server.Spec.DNSNames, server.Spec.IPAddresses, dns, ips)
	}

	// The export, on the Secret cert-manager would write for the server
	// Certificate (a kubernetes.io/tls Secret with ca.crt).
	ca := haproxytest.NewCA(t, "haproxy admin socket CA")
	leaf := ca.Issue(t, dns[0], false, time.Now().Add(time.Hour))
	if _, err := api.client.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: server.Spec.SecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	export := pageFence(t, certPage, "<!-- export: run by TestCertificatesWithCertManager -->")
	if !strings.Contains(export, "secret "+server.Spec.SecretName+" ") {
		t.Errorf("the export commands do not read the server Certificate's Secret %s", server.Spec.SecretName)
	}
	dir := t.TempDir()
	runScript(t, dir, inNamespace(t, export, ns))
	serverPEM, err := os.ReadFile(filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(serverPEM, append(slices.Clone(leaf.CertPEM), leaf.KeyPEM...)) || !bytes.Equal(caPEM, ca.PEM) {
		t.Fatal("the export does not give server.pem (certificate, then key) and ca.crt")
	}
	h := haproxytest.StartWith(t, haproxytest.Options{AdminTLS: &haproxytest.AdminTLS{ServerCert: serverPEM, ClientCA: caPEM}},
		haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin"}})
	// The client Certificate's Secret, as cert-manager writes it from the
	// same CA.
	c := ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour))
	if err := adminClient(t, h.AdminTLS, dns[0], mounted(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": c.CertPEM, "tls.key": c.KeyPEM})); err != nil {
		t.Errorf("with the exported files: %v", err)
	}
}
