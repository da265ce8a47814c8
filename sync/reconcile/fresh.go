package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// kubeRead is one read of Kubernetes and the desired backends computed from it.
type kubeRead struct {
	started  time.Time
	done     chan struct{}
	backends []model.Backend
	report   desired.Report
	uid      types.UID
	pods     []corev1.Pod
	// warnings say what in the configuration matches nothing, failed
	// read or not (desired.Warning).
	warnings []desired.Warning
	err      error
}

// freshReader shares Kubernetes reads between the targets of one reconcile,
// but only reads that started after the caller's HAProxy read ended.
//
// That order is what keeps replicas from undoing each other's work: a write
// to the Data Plane API carries the version of the HAProxy read, so it lands
// only if nobody wrote since; and as the Kubernetes read came after that
// HAProxy read, it is at least as new as whatever the last writer had read.
// A replica holding an older view gets a conflict, never the last word.
type freshReader struct {
	src  Source
	opts desired.Options
	// skipped receives each read's report of what was left out.
	skipped func(desired.Report)

	mu   sync.Mutex
	last *kubeRead
	good *kubeRead // the newest read that succeeded; nil before one
}

// after returns desired backends from a Kubernetes read that started at or
// after t.
func (f *freshReader) after(ctx context.Context, t time.Time) ([]model.Backend, error) {
	f.mu.Lock()
	r := f.last
	if r == nil || r.started.Before(t) {
		r = &kubeRead{started: time.Now(), done: make(chan struct{})}
		f.last = r
		f.mu.Unlock()
		f.read(ctx, r)
		close(r.done)
		if r.err == nil {
			f.mu.Lock()
			if f.last == r {
				f.good = r
			}
			f.mu.Unlock()
		}
		return r.backends, r.err
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.backends, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readRetries are the pauses before each new attempt of a Kubernetes read
// whose connection broke (brokenRead): a watch or load balancer cut, an API
// server restarting. One cut connection then costs no failed reconcile.
var readRetries = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond}

// read fills r from one read of Kubernetes (tried again while its
// connection breaks, readRetries).
func (f *freshReader) read(ctx context.Context, r *kubeRead) {
	in, err := f.src.Read(ctx)
	for _, pause := range readRetries {
		if err == nil || !brokenRead(ctx, err) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			in, err = f.src.Read(ctx)
		}
	}
	if err != nil {
		r.warnings = desired.ReadWarnings(err)
		r.err = &kubeError{fmt.Errorf("read kubernetes: %w", err)}
		return
	}
	backends, report, err := desired.Compute(in, f.opts)
	r.warnings, r.uid = report.Warnings, in.Service.UID // an Event about a warning names the Service
	if err != nil {
		r.err = &kubeError{fmt.Errorf("desired state: %w", err)}
		return
	}
	if f.skipped != nil {
		f.skipped(report)
	}
	r.backends, r.report, r.uid, r.pods = backends, report, in.Service.UID, in.Pods
}

// brokenRead says whether err is a read whose connection broke, with no
// answer from the API server: not one of its statuses (a 403 or a 404 says
// what the next attempt says too), not a source's own class (a manifests
// file), not a TLS handshake refused nor a name that does not resolve (what
// the next attempt says too), not the reconcile's deadline.
func brokenRead(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.As(err, new(apierrors.APIStatus)) || errors.As(err, new(failure.Classed)) || failure.TLSRefused(err) {
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a name that does not resolve stays so
	}
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne)
}

// latest returns the newest read that succeeded (zero before one): its
// desired backends, report, the Service's UID and the pods read.
func (f *freshReader) latest() kubeRead {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.good == nil {
		return kubeRead{}
	}
	return *f.good
}

// warnings returns the warnings of the newest read, failed or not (a
// Service or port not found fails every read and must still be said), and
// the Service's UID when that read got the Service.
func (f *freshReader) warnings() ([]desired.Warning, types.UID) {
	f.mu.Lock()
	r := f.last
	f.mu.Unlock()
	if r == nil {
		return nil, ""
	}
	select {
	case <-r.done:
		return r.warnings, r.uid
	default:
		return nil, "" // still under way: nothing to say of it yet
	}
}

// desired is the number of desired servers of a read.
func (r kubeRead) desired() int {
	n := 0
	for _, b := range r.backends {
		n += len(b.Servers)
	}
	return n
}

// kubeError is a failed Kubernetes read or an unusable answer: the reconcile
// stops for every target and nothing is written.
type kubeError struct{ err error }

func (e *kubeError) Error() string { return e.err.Error() }
func (e *kubeError) Unwrap() error { return e.err }

// Class is the source's own class when it gave one (a manifests file
// without the Service is Permanent: reading it again cannot help), else
// Temporary for the caller (an API server restarting, RBAC being applied, a
// Service being created); the reconcile itself does not retry it.
func (e *kubeError) Class() failure.Class {
	var c failure.Classed
	if errors.As(e.err, &c) {
		return c.Class()
	}
	return failure.Temporary
}
