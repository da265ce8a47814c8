package runtimeapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/tlsfiles"
)

// tlsHAProxy starts HAProxy with TLS and client certificates in front of
// its unix admin socket (haproxytest.AdminTLSLines), its certificates from
// ca.
func tlsHAProxy(t *testing.T, ca *haproxytest.CA) *haproxytest.HAProxy {
	t.Helper()
	server := ca.Issue(t, "haproxy.test", false, time.Now().Add(time.Hour))
	return haproxytest.StartWith(t, haproxytest.Options{AdminTLS: &haproxytest.AdminTLS{
		ServerCert: server.CertPEM, ServerKey: server.KeyPEM, ClientCA: ca.PEM,
	}}, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
}

// clientFiles writes the CA bundle and a client certificate into a fresh
// directory, as a mounted Secret would hold them.
func clientFiles(t *testing.T, ca *haproxytest.CA, client haproxytest.Leaf) tlsfiles.Files {
	t.Helper()
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.crt")
	haproxytest.WriteFile(t, caPath, ca.PEM)
	cert, key := client.Write(t, dir, "tls")
	return tlsfiles.Files{CA: caPath, Cert: cert, Key: key}
}

func tlsClient(t *testing.T, url string, files tlsfiles.Files) *runtimeapi.Client {
	t.Helper()
	l, err := tlsfiles.New(files)
	if err != nil {
		t.Fatal(err)
	}
	c, err := runtimeapi.New(url, model.Settings{Balance: "roundrobin", TCPCheck: true}, chk, runtimeapi.WithTLS(l, ""))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRuntimeDriverOverTLS: through HAProxy's TLS listener in front of its
// unix admin socket, the runtime driver syncs servers (the unix socket
// sees them), and the reload watch's "show info" answers too.
func TestRuntimeDriverOverTLS(t *testing.T) {
	ca := haproxytest.NewCA(t, "test CA")
	h := tlsHAProxy(t, ca)
	url := "tls://" + h.AdminTLS
	c := tlsClient(t, url, clientFiles(t, ca, ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour))))

	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	converge(t, c, want(srv("a", "127.0.0.1", ports[0], model.Ready), srv("b", "127.0.0.1", ports[1], model.Ready)), 5*time.Second)
	s := h.Servers(t, "be") // through the unix socket
	if len(s) != 2 || s["a"].Port != ports[0] || s["b"].Port != ports[1] || !s["a"].Up() || s["a"].Maint() || s["a"].Drain() {
		t.Fatalf("servers seen on the unix socket: %+v", s)
	}
	if id, err := c.Process(context.Background()); err != nil || id == "" {
		t.Errorf("show info over tls://: %q, %v", id, err)
	}
}

// TestTLSRefusals: HAProxy's listener refuses a client without a
// certificate or with one from another CA, and the driver refuses a server
// whose certificate does not chain to its CA; each is a Permanent failure
// (retrying does not help), said in the error.
func TestTLSRefusals(t *testing.T) {
	ca := haproxytest.NewCA(t, "test CA")
	other := haproxytest.NewCA(t, "another CA")
	h := tlsHAProxy(t, ca)
	url := "tls://" + h.AdminTLS
	good := clientFiles(t, ca, ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour)))

	foreign := clientFiles(t, ca, other.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour)))
	wrongServerCA := clientFiles(t, other, ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour)))
	for _, tt := range []struct {
		name string
		c    *runtimeapi.Client
		want string
	}{
		{"a client certificate from another CA", tlsClient(t, url, foreign), "remote error"},
		{"a server certificate from another CA", tlsClient(t, url, wrongServerCA), "certificate signed by unknown authority"},
		{"a server name its certificate does not carry", func() *runtimeapi.Client {
			l, err := tlsfiles.New(good)
			if err != nil {
				t.Fatal(err)
			}
			c, err := runtimeapi.New(url, model.Settings{}, chk, runtimeapi.WithTLS(l, "elsewhere.test"))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}(), "elsewhere.test"},
		{"tcp:// in clear to the TLS listener", mustNew(t, "tcp://"+h.AdminTLS), ""},
	} {
		_, err := tt.c.Read(context.Background(), "be")
		t.Logf("%s: %v", tt.name, err)
		if err == nil {
			t.Errorf("%s: read the backend", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want it to say %q", tt.name, err, tt.want)
		}
		if tt.want != "" && failure.Of(err) != failure.Permanent {
			t.Errorf("%s: %v is %s, want permanent", tt.name, err, failure.Of(err))
		}
	}

	// No certificate at all: a plain TLS client, as an intruder would be.
	noCert := runtimeapi.Socket{Network: "tcp", Address: h.AdminTLS, ServerName: "127.0.0.1", TLS: noClientCert{ca}}
	_, err := noCert.Command(context.Background(), "show info")
	t.Logf("no client certificate: %v", err)
	if err == nil || failure.Of(err) != failure.Permanent {
		t.Errorf("a client without a certificate: %v (%s), want a permanent refusal", err, failure.Of(err))
	}
	// The good one passes, so the refusals above are the certificates'.
	if _, err := tlsClient(t, url, good).Read(context.Background(), "be"); err != nil {
		t.Errorf("the right certificates: %v", err)
	}
}

func mustNew(t *testing.T, url string) *runtimeapi.Client {
	t.Helper()
	c, err := runtimeapi.New(url, model.Settings{}, chk)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientCertificateRotation: a client certificate that expires is
// refused; new files from the same CA, written in place as cert-manager
// renews a Secret, are used by the next connection, without a new client.
func TestClientCertificateRotation(t *testing.T) {
	ca := haproxytest.NewCA(t, "test CA")
	h := tlsHAProxy(t, ca)
	expires := time.Now().Add(2 * time.Second)
	files := clientFiles(t, ca, ca.Issue(t, "haproxy-k8s-sync", true, expires))
	c := tlsClient(t, "tls://"+h.AdminTLS, files)
	if _, err := c.Read(context.Background(), "be"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	time.Sleep(time.Until(expires) + 1100*time.Millisecond) // X.509 times have whole seconds
	_, err := c.Read(context.Background(), "be")
	t.Logf("expired: %v", err)
	if err == nil || failure.Of(err) != failure.Permanent {
		t.Fatalf("with an expired client certificate: %v (%s), want a permanent refusal", err, failure.Of(err))
	}
	renewed := ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour))
	renewed.Write(t, filepath.Dir(files.Cert), "tls")
	if _, err := c.Read(context.Background(), "be"); err != nil {
		t.Fatalf("after the files were renewed: %v", err)
	}
}

// noClientCert trusts the CA but has no certificate to present.
type noClientCert struct{ ca *haproxytest.CA }

func (n noClientCert) ClientConfig(serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AddCert(n.ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: serverName}, nil
}
