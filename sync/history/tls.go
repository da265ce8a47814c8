package history

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// A TLS history's (Setup.TLS) client certificate lives tlsValid and is
// renewed every tlsRenew, as cert-manager renews a short-lived one: a
// service that kept the first one is refused by every HAProxy within
// tlsValid.
const (
	tlsServerName = "haproxy.test"
	tlsRenew      = 8 * time.Second
	tlsValid      = 20 * time.Second
)

// adminTLS is a history's TLS in front of the admin sockets: a CA,
// HAProxy's certificate from it, and the service's client certificate in a
// folder laid out as the kubelet projects a Secret (the files are links
// into ..data, a link swapped at once to a new folder on each renewal).
type adminTLS struct {
	ca     *haproxytest.CA
	server haproxytest.Leaf
	dir    string
	prev   string // the folder ..data named before the last renewal

	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	n    int // renewals
}

func startAdminTLS(t testing.TB) *adminTLS {
	t.Helper()
	a := &adminTLS{ca: haproxytest.NewCA(t, "history CA"), dir: t.TempDir(), stop: make(chan struct{})}
	a.server = a.ca.Issue(t, tlsServerName, false, time.Now().Add(3*time.Hour))
	if err := a.renew(); err != nil {
		t.Fatal(err)
	}
	a.wg.Go(func() {
		tick := time.NewTicker(tlsRenew)
		defer tick.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-tick.C:
			}
			if err := a.renew(); err != nil {
				a.mu.Lock()
				a.err = errors.Join(a.err, err)
				a.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		close(a.stop)
		a.wg.Wait()
		if a.err != nil {
			t.Errorf("renew the client certificate (the harness's): %v", a.err)
		}
	})
	return a
}

// renew issues a client certificate valid tlsValid and swaps it in.
func (a *adminTLS) renew() error {
	leaf, err := a.ca.TryIssue("haproxy-k8s-sync", true, time.Now().Add(tlsValid))
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	ts := fmt.Sprintf("..%s_%d", time.Now().UTC().Format("2006_01_02_15_04_05"), a.n)
	if err := os.Mkdir(filepath.Join(a.dir, ts), 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"ca.crt": a.ca.PEM, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(a.dir, ts, name), b, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(a.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(a.dir, "..data")); err != nil {
		return err
	}
	for _, name := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if _, err := os.Lstat(filepath.Join(a.dir, name)); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(a.dir, name)); err != nil {
				return err
			}
		}
	}
	if a.prev != "" {
		if err := os.RemoveAll(filepath.Join(a.dir, a.prev)); err != nil {
			return err
		}
	}
	a.prev = ts
	return nil
}

// env are the service's variables for it.
func (a *adminTLS) env() map[string]string {
	return map[string]string{
		"HAPROXY_RUNTIME_TLS_CA": filepath.Join(a.dir, "ca.crt"), "HAPROXY_RUNTIME_TLS_CERT": filepath.Join(a.dir, "tls.crt"),
		"HAPROXY_RUNTIME_TLS_KEY": filepath.Join(a.dir, "tls.key"), "HAPROXY_RUNTIME_TLS_SERVER_NAME": tlsServerName,
	}
}

// haproxy is what each target's TLS listener gets.
func (a *adminTLS) haproxy() *haproxytest.AdminTLS {
	return &haproxytest.AdminTLS{ServerCert: a.server.CertPEM, ServerKey: a.server.KeyPEM, ClientCA: a.ca.PEM}
}
