package failure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// classedAPIError stands for a driver's own error type with a class.
type classedAPIError struct{ status int }

func (e *classedAPIError) Error() string { return fmt.Sprint(e.status) }
func (e *classedAPIError) Class() Class {
	if e.status >= 500 {
		return Temporary
	}
	return Permanent
}

func TestOf(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	noSocket := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}
	noHost := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "haproxy", IsNotFound: true}}
	dnsTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "haproxy", IsTimeout: true}}
	for _, tt := range []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, ""},
		{"a broken connection", &NetworkError{Err: errors.New("read: connection reset by peer")}, Temporary},
		{"connection refused, wrapped twice", fmt.Errorf("read be: %w", &NetworkError{Err: refused}), Unreachable},
		{"no such socket", &NetworkError{Err: noSocket}, Unreachable},
		{"refused without a NetworkError around it", refused, Unreachable},
		{"a name that does not resolve (NXDOMAIN)", fmt.Errorf("read be: %w", &NetworkError{Err: noHost}), Unreachable},
		{"a resolver that timed out", &NetworkError{Err: dnsTimeout}, Temporary},
		{"a manifests file without the Service", fmt.Errorf("read kubernetes: %w", &InputError{Err: errors.New("service not found")}), Permanent},
		{"a manifests file that is not there", &InputError{Err: &os.PathError{Op: "stat", Path: "dump.yaml", Err: syscall.ENOENT}}, Permanent},
		{"a conflict", fmt.Errorf("apply: %w", &ConflictError{Msg: "version changed"}), Temporary},
		{"a backend that cannot be managed", fmt.Errorf("read: %w", &BackendError{Backend: "be", Reason: "static-rr"}), Permanent},
		{"a driver's own 503", fmt.Errorf("put: %w", &classedAPIError{503}), Temporary},
		{"a driver's own 400", &classedAPIError{400}, Permanent},
		{"nobody classed it", errors.New("desired state has no backend"), Permanent},
		{"the deadline", fmt.Errorf("read: %w", &NetworkError{Err: context.DeadlineExceeded}), Temporary},
		{"the deadline ended the retries", fmt.Errorf("retry: %w", context.DeadlineExceeded), Temporary},
		{"a server certificate from another CA", &NetworkError{Err: fmt.Errorf("TLS handshake: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}})}, Permanent},
		{"the server refused the client certificate (an alert)", fmt.Errorf("read: %w", &NetworkError{Err: &net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}}), Permanent},
		{"tls:// to a socket in clear", &NetworkError{Err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}, Permanent},
		{"a read that broke (not an alert)", &NetworkError{Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, Temporary},
		{"not permitted (a full conntrack table, or a firewall rule)", &NetworkError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EPERM)}}, Temporary},
	} {
		if got := Of(tt.err); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		if Retryable(tt.err) != (tt.want == Temporary) {
			t.Errorf("%s: Retryable %v", tt.name, Retryable(tt.err))
		}
	}
	var be *BackendError
	if !errors.As(fmt.Errorf("x: %w", &BackendError{Backend: "be"}), &be) || be.Backend != "be" {
		t.Error("errors.As does not find a wrapped BackendError")
	}
}

// TestUnmendableFailuresArePermanent: what cannot mend until someone
// changes the configuration is Permanent, said at the first attempt: the
// service's user may not open the admin socket (permission denied, however
// the drivers wrap it), a backend HAProxy does not have, a client
// certificate HAProxy refuses (at the handshake, or at the first read under
// TLS 1.3), a server certificate the service refuses.
func TestUnmendableFailuresArePermanent(t *testing.T) {
	denied := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"permission denied on the admin socket", fmt.Errorf("read be: %w", &NetworkError{Err: fmt.Errorf("dial /run/haproxy/admin.sock: %w", denied)})},
		{"permission denied, no NetworkError around it", denied},
		{"permission denied on the socket's directory", &NetworkError{Err: &os.PathError{Op: "stat", Path: "/run/haproxy", Err: syscall.EACCES}}},
		{"a backend HAProxy does not have", fmt.Errorf("read: %w", &BackendError{Backend: "nope", Reason: "the running HAProxy has no backend of that name"})},
		{"a client certificate refused at the handshake", &NetworkError{Err: fmt.Errorf("TLS handshake: %w", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")})}},
		{"an expired client certificate, said at the first read (TLS 1.3)", &NetworkError{Err: fmt.Errorf("read reply: %w", &net.OpError{Op: "remote error", Err: errors.New("tls: expired certificate")})}},
		{"a server certificate from another CA", &NetworkError{Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}},
	} {
		if got := Of(tt.err); got != Permanent || Retryable(tt.err) {
			t.Errorf("%s: %q (retryable %v), want permanent", tt.name, got, Retryable(tt.err))
		}
	}
}
