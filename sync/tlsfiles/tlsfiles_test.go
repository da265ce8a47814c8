package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/tlsfiles"
)

// write lays out a CA bundle, a client certificate and key in a new
// directory.
func write(t *testing.T, ca *haproxytest.CA, leaf haproxytest.Leaf) tlsfiles.Files {
	t.Helper()
	dir := t.TempDir()
	f := tlsfiles.Files{CA: filepath.Join(dir, "ca.crt")}
	haproxytest.WriteFile(t, f.CA, ca.PEM)
	f.Cert, f.Key = leaf.Write(t, dir, "tls")
	return f
}

// presented is the certificate a configuration presents to a server.
func presented(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || len(c.Certificate) == 0 {
		t.Fatalf("no client certificate: %v", err)
	}
	return c.Certificate[0]
}

// TestNewSaysWhichFileIsWrong: each unusable file is an Error naming its part.
func TestNewSaysWhichFileIsWrong(t *testing.T) {
	ca := haproxytest.NewCA(t, "ca")
	good := write(t, ca, ca.Issue(t, "client", true, time.Now().Add(time.Hour)))
	other := write(t, ca, ca.Issue(t, "client", true, time.Now().Add(time.Hour)))
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	haproxytest.WriteFile(t, garbage, []byte("not PEM\n"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		name  string
		files tlsfiles.Files
		want  tlsfiles.Part
	}{
		{"a missing CA", tlsfiles.Files{CA: missing, Cert: good.Cert, Key: good.Key}, tlsfiles.CA},
		{"a CA that is not PEM", tlsfiles.Files{CA: garbage, Cert: good.Cert, Key: good.Key}, tlsfiles.CA},
		{"a missing certificate", tlsfiles.Files{CA: good.CA, Cert: missing, Key: good.Key}, tlsfiles.Cert},
		{"a certificate that is not PEM", tlsfiles.Files{CA: good.CA, Cert: garbage, Key: good.Key}, tlsfiles.Cert},
		{"a missing key", tlsfiles.Files{CA: good.CA, Cert: good.Cert, Key: missing}, tlsfiles.Key},
		{"a key that is not PEM", tlsfiles.Files{CA: good.CA, Cert: good.Cert, Key: garbage}, tlsfiles.Key},
		{"another certificate's key", tlsfiles.Files{CA: good.CA, Cert: good.Cert, Key: other.Key}, tlsfiles.Key},
	} {
		_, err := tlsfiles.New(tt.files)
		var fe *tlsfiles.Error
		if !errors.As(err, &fe) || fe.Part != tt.want {
			t.Errorf("%s: %v, want an error about the %s file", tt.name, err, tt.want)
		}
	}
	if _, err := tlsfiles.New(good); err != nil {
		t.Errorf("good files: %v", err)
	}
}

// TestReadAgainWhenChanged: the same certificate while the files stay, the
// new one as soon as they are replaced; a broken replacement fails until
// it is repaired.
func TestReadAgainWhenChanged(t *testing.T) {
	ca := haproxytest.NewCA(t, "ca")
	first := ca.Issue(t, "client", true, time.Now().Add(time.Hour))
	f := write(t, ca, first)
	l, err := tlsfiles.New(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg1, err := l.ClientConfig("haproxy")
	if err != nil {
		t.Fatal(err)
	}
	if cfg1.ServerName != "haproxy" || cfg1.RootCAs == nil {
		t.Errorf("config: server name %q, roots %v", cfg1.ServerName, cfg1.RootCAs)
	}
	cfg2, _ := l.ClientConfig("haproxy")
	if !bytes.Equal(presented(t, cfg1), presented(t, cfg2)) {
		t.Error("unchanged files gave another certificate")
	}

	second := ca.Issue(t, "client", true, time.Now().Add(time.Hour))
	second.Write(t, filepath.Dir(f.Cert), "tls")
	cfg3, err := l.ClientConfig("haproxy")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(presented(t, cfg3), presented(t, cfg1)) {
		t.Error("renewed files: still the first certificate")
	}

	// The certificate replaced before its key: this connection fails,
	// naming the key; once the key follows, the next one works.
	third := ca.Issue(t, "client", true, time.Now().Add(time.Hour))
	haproxytest.WriteFile(t, f.Cert, third.CertPEM)
	var fe *tlsfiles.Error
	if _, err := l.ClientConfig("haproxy"); !errors.As(err, &fe) || fe.Part != tlsfiles.Key {
		t.Errorf("certificate without its key: %v, want an error about the key", err)
	}
	haproxytest.WriteFile(t, f.Key, third.KeyPEM)
	cfg4, err := l.ClientConfig("haproxy")
	if err != nil {
		t.Fatalf("after the key followed: %v", err)
	}
	if bytes.Equal(presented(t, cfg4), presented(t, cfg3)) {
		t.Error("third files: still the second certificate")
	}
}
