// Package failure names the kinds of failure a reconcile meets, once, for
// the drivers that produce them, the reconciler that retries them and the
// callers that are told of them. It is a leaf: it imports nothing of this
// project.
//
// A failure's class says who can do something about it:
//
//   - Temporary: trying again soon may succeed (no answer, 429, 5xx, a
//     version conflict): the reconciler retries it from a fresh read;
//   - Unreachable: nothing listens at the target (connection refused, no
//     such socket), or its name does not resolve (NXDOMAIN: a placeholder
//     or misspelt host). It fails in milliseconds and is not retried within
//     the reconcile, which would hold back the targets that answer; the
//     follow-up and the caller try again later;
//   - Permanent: the target refuses what is asked, or cannot be managed as
//     configured (a balance algorithm that cannot take runtime servers, a
//     backend HAProxy does not have, a 4xx from the Data Plane API, a
//     refused runtime command, a TLS handshake refused by either side, a
//     socket this process may not open). Nothing helps until someone
//     changes the configuration: it is said at the first attempt, not
//     retried until the reconcile's timeout.
package failure

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// Class is the kind of a failure.
type Class string

// The classes, from the most hopeful to the least.
const (
	Temporary   Class = "temporary"
	Unreachable Class = "unreachable"
	Permanent   Class = "permanent"
)

// Classed is an error that knows its class.
type Classed interface {
	error
	Class() Class
}

// Of returns err's class: Permanent for an *InputError, Unreachable when
// nothing listened (connection
// refused, no such socket) or the host name does not exist, wherever that
// sits in the chain, Permanent for permission denied (EACCES: a unix
// socket whose mode or directory this process's user may not open; the
// NetworkError around it would say Temporary, and 30 s of retries would
// only delay saying it) and for a TLS handshake refused, Temporary when a
// deadline ran out, else the class of the first error in the chain that
// has one, else Permanent: an error nobody classed is not retried. Of(nil)
// is "".
//
// EPERM stays with the chain's class: a connect refused by a local
// firewall rule says so, but so does a full conntrack table, which clears.
//
// A name that does not resolve is answered by the resolver at once and
// stays so until someone creates it or fixes the URL: retrying it for the
// whole reconcile only delays the answer. A resolver that timed out or
// failed (no NXDOMAIN) stays Temporary.
func Of(err error) Class {
	if err == nil {
		return ""
	}
	if errors.As(err, new(*InputError)) { // whatever it wraps (a manifests file not found is ENOENT)
		return Permanent
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return Unreachable
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return Unreachable
	}
	if errors.Is(err, syscall.EACCES) || TLSRefused(err) {
		return Permanent
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Temporary
	}
	var c Classed
	if errors.As(err, &c) {
		return c.Class()
	}
	return Permanent
}

// TLSRefused reports whether err is a TLS handshake that one side refused:
// the server's certificate does not chain to the CA or name another host,
// the server sent an alert (no client certificate, one from another CA, an
// expired one: under TLS 1.3 it comes at the first read), or the other end
// does not speak TLS. Trying again does not help until certificates or
// URLs change.
func TLSRefused(err error) bool {
	if errors.As(err, new(*tls.CertificateVerificationError)) || errors.As(err, new(tls.RecordHeaderError)) {
		return true
	}
	// crypto/tls returns a received alert as a net.OpError with this Op,
	// its alert type unexported.
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// Retryable reports whether trying again soon may succeed.
func Retryable(err error) bool { return Of(err) == Temporary }

// NetworkError is a request or command that got no answer: the connection
// failed, broke, or closed before a reply. Temporary, or Unreachable when
// nothing listened (see Of).
type NetworkError struct{ Err error }

func (e *NetworkError) Error() string { return e.Err.Error() }
func (e *NetworkError) Unwrap() error { return e.Err }

// Class is Temporary; Of finds Unreachable in the chain first.
func (e *NetworkError) Class() Class { return Temporary }

// ConflictError is a lost race with another writer, seen by the client
// itself (two reads at different versions, a transaction swept away):
// Temporary, like the API's 409.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Class is Temporary.
func (e *ConflictError) Class() Class { return Temporary }

// BackendError is a backend this service cannot manage as configured, e.g.
// a balance algorithm that cannot take runtime servers: Permanent.
type BackendError struct {
	Backend string
	Reason  string
}

func (e *BackendError) Error() string { return "backend " + e.Backend + ": " + e.Reason }

// Class is Permanent.
func (e *BackendError) Class() Class { return Permanent }

// InputError is input that cannot work however often it is read again, e.g.
// a manifests file without the followed Service: Permanent, until someone
// changes it.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Class is Permanent.
func (e *InputError) Class() Class { return Permanent }
