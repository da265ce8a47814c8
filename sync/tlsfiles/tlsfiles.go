// Package tlsfiles reads a CA bundle, a client certificate and its key from
// files for the TLS client of the admin socket (HAPROXY_RUNTIME_URL=tls://),
// and reads them again when they change: cert-manager and kubelet rotate a
// mounted Secret's files in place, and a long-running service must present
// the new certificate without a restart.
//
// Each ClientConfig stats the three files (three syscalls per connection,
// nothing next to a TLS handshake) and parses them again only when one's
// identity, size or modification time changed. A rotation that leaves the
// files unreadable or mismatched (a certificate written before its key)
// fails those connections with the file at fault, and the next one tries
// again; the last good pair is not kept, so a broken rotation is seen.
//
// No TLS session cache is kept: a resumed session would not present the
// certificate again, and a server would go on trusting one that expired.
//
// It is a leaf: it imports nothing of this project.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Files are the paths of the PEM files.
type Files struct {
	// CA is the bundle the server's certificate must chain to.
	CA string
	// Cert is the client certificate (its chain may follow it), Key its
	// private key.
	Cert, Key string
}

// Part names one of the files, for an error to say which variable is wrong.
type Part string

// The parts.
const (
	CA   Part = "ca"
	Cert Part = "cert"
	Key  Part = "key"
)

// Error is a file that cannot be read or used.
type Error struct {
	Part Part
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Loader hands out TLS client configurations from the files' current contents.
type Loader struct {
	files Files

	mu     sync.Mutex
	stamps [3]os.FileInfo // CA, Cert, Key as last parsed
	roots  *x509.CertPool
	cert   *tls.Certificate
}

// New reads and checks the files once: an error says which one is wrong.
func New(f Files) (*Loader, error) {
	l := &Loader{files: f}
	if _, err := l.ClientConfig(""); err != nil {
		return nil, err
	}
	return l, nil
}

// Files returns the paths the loader reads.
func (l *Loader) Files() Files { return l.files }

// ClientConfig returns a configuration for one connection: the server must
// present a certificate for serverName that chains to the CA bundle; the
// client presents its certificate whatever CAs the server says it accepts,
// so that a refusal is the server's, with its alert, not a silent empty
// certificate.
func (l *Loader) ClientConfig(serverName string) (*tls.Config, error) {
	roots, cert, err := l.current()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		RootCAs:    roots,
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
	}, nil
}

// current parses the files again if any changed since the last parse.
func (l *Loader) current() (*x509.CertPool, *tls.Certificate, error) {
	var now [3]os.FileInfo
	for i, p := range []struct {
		part Part
		path string
	}{{CA, l.files.CA}, {Cert, l.files.Cert}, {Key, l.files.Key}} {
		fi, err := os.Stat(p.path)
		if err != nil {
			return nil, nil, &Error{Part: p.part, Path: p.path, Err: err}
		}
		now[i] = fi
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cert != nil && same(now, l.stamps) {
		return l.roots, l.cert, nil
	}
	roots, cert, err := parse(l.files)
	if err != nil {
		l.cert = nil // the next connection tries again
		return nil, nil, err
	}
	l.stamps, l.roots, l.cert = now, roots, cert
	return roots, cert, nil
}

// same reports whether each file is the one seen before, unchanged: the
// same inode (a Secret's files are swapped by a symlink), size and mtime.
func same(a, b [3]os.FileInfo) bool {
	for i := range a {
		if b[i] == nil || !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return false
		}
	}
	return true
}

// parse reads the three files.
func parse(f Files) (*x509.CertPool, *tls.Certificate, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, &Error{Part: CA, Path: f.CA, Err: err}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, nil, &Error{Part: CA, Path: f.CA, Err: errors.New("no PEM certificate in it")}
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, nil, &Error{Part: Cert, Path: f.Cert, Err: err}
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, nil, &Error{Part: Key, Path: f.Key, Err: err}
	}
	if !hasCert(certPEM) {
		return nil, nil, &Error{Part: Cert, Path: f.Cert, Err: errors.New("no PEM certificate in it")}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The certificate parsed: what fails is the key, or the pair.
		return nil, nil, &Error{Part: Key, Path: f.Key, Err: fmt.Errorf("with the certificate %s: %w", f.Cert, err)}
	}
	return roots, &cert, nil
}

// hasCert reports whether b holds at least one parsable certificate.
func hasCert(b []byte) bool {
	return x509.NewCertPool().AppendCertsFromPEM(b)
}
