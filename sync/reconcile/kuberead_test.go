package reconcile_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// failingSource fails its first reads with err, then reads in.
type failingSource struct {
	mu    sync.Mutex
	in    desired.Input
	err   error
	fails int
	reads int
}

func (s *failingSource) Read(context.Context) (desired.Input, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.reads <= s.fails {
		return desired.Input{}, s.err
	}
	return s.in, nil
}

// TestBrokenKubernetesReadIsTriedAgain: a Kubernetes read whose connection
// broke (a watch or load balancer cut, found by serve history 2 with the
// runtime driver: a reconcile failed on "unexpected EOF") is tried again
// within the reconcile, twice at most; an answer of the API server (403),
// a certificate it refuses, a name that does not resolve are not: the
// next attempt would say the same.
func TestBrokenKubernetesReadIsTriedAgain(t *testing.T) {
	cut := fmt.Errorf("list endpointslices ingress/web: unexpected error when reading response body. Please retry. Original error: %w", io.ErrUnexpectedEOF)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "endpointslices"}, "", errors.New("RBAC"))
	for _, c := range []struct {
		name      string
		err       error
		fails     int
		wantReads int
		wantErr   bool
	}{
		{"cut once", cut, 1, 2, false},
		{"cut twice", cut, 2, 3, false},
		{"cut three times", cut, 3, 3, true},
		{"forbidden", forbidden, 1, 1, true},
		{"a certificate of another authority", fmt.Errorf("get service: %w", &url.Error{Op: "Get", URL: "https://api", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}), 1, 1, true},
		{"a name that does not resolve", fmt.Errorf("get service: %w", &url.Error{Op: "Get", URL: "https://api", Err: &net.DNSError{Err: "no such host", Name: "api", IsNotFound: true}}), 1, 1, true},
		{"a connection refused", fmt.Errorf("get service: %w", &url.Error{Op: "Get", URL: "https://api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}), 1, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &failingSource{in: cluster("10.244.0.1"), err: c.err, fails: c.fails}
			d := &reconciletest.Driver{}
			_, err := reconciler(src, d).Reconcile(context.Background(), false)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v, want an error: %v", err, c.wantErr)
			}
			if src.reads != c.wantReads {
				t.Errorf("%d reads, want %d", src.reads, c.wantReads)
			}
			if !c.wantErr {
				if got := d.States(); got["10.244.0.1"] != "ready" {
					t.Errorf("servers %v", got)
				}
			}
		})
	}
}
