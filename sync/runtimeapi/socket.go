package runtimeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// Socket sends commands to an HAProxy runtime API socket (a "stats socket ...
// level admin", or the master socket): Command and Commands use one
// connection per line (HAProxy answers it, then closes a non-interactive
// connection); Sequences use one interactive connection for many steps.
type Socket struct {
	Network string // "unix" or "tcp"
	Address string
	// TLS, when set, wraps each tcp connection in TLS with the
	// configuration it hands out for that connection (HAPROXY_RUNTIME_URL
	// tls://): asked at every dial, so that rotated files are used.
	TLS TLSConfigs
	// ServerName is the name the server's certificate must carry.
	ServerName string
	// Timeout bounds one command when the context has no earlier deadline.
	Timeout time.Duration
}

// Command sends one command and returns HAProxy's reply, trailing blank lines
// removed. The reply is text; it is up to the caller to tell success from error.
func (s Socket) Command(ctx context.Context, cmd string) (string, error) {
	return s.Commands(ctx, cmd)
}

// Commands sends several commands on one line, separated by ';', which every
// version runs in order (3.0+ runs only the first of newline-separated
// commands). HAProxy runs them all even when one fails: use it only for
// commands whose later ones are harmless after a failure (to stop at a
// failure, Sequences). The reply holds each command's answer followed by a
// blank line.
func (s Socket) Commands(ctx context.Context, cmds ...string) (string, error) {
	cmd, err := line(cmds)
	if err != nil {
		return "", err
	}
	conn, cancel, err := s.dial(ctx, 0)
	if err != nil {
		return "", err
	}
	defer cancel()
	defer conn.Close()
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", &failure.NetworkError{Err: fmt.Errorf("send %q: %w", cmd, err)}
	}
	// Half-close: the master socket waits for the end of input.
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	reply, err := io.ReadAll(io.LimitReader(conn, maxReply+1))
	if err != nil {
		return "", &failure.NetworkError{Err: fmt.Errorf("read reply to %q: %w", cmd, err)}
	}
	if len(reply) > maxReply {
		// A cut reply would read as fewer servers, or fewer sessions.
		return "", fmt.Errorf("reply to %q: over %d bytes", cmd, maxReply)
	}
	if len(reply) == 0 {
		// HAProxy ends every answer with a blank line, so even a command
		// with nothing to say answers "\n": a connection closed with no
		// byte (a relay whose HAProxy is down) ran nothing.
		return "", &failure.NetworkError{Err: fmt.Errorf("send %q: connection closed with no reply", cmd)}
	}
	return strings.TrimRight(string(reply), "\n"), nil
}

// line joins commands with ';', refusing an empty one and any that would
// split the line.
func line(cmds []string) (string, error) {
	for _, c := range cmds {
		if c == "" || strings.ContainsAny(c, "\n;") {
			return "", fmt.Errorf("runtime command %q: empty, newline and ';' are not allowed", c)
		}
	}
	return strings.Join(cmds, "; "), nil
}

// Option changes how New reaches the socket.
type Option func(*Socket)

// WithTLS gives tls:// URLs their TLS configurations; serverName, when
// not empty, is the name the server's certificate must carry instead of
// the URL's host (a socket reached by address whose certificate names a
// host).
func WithTLS(configs TLSConfigs, serverName string) Option {
	return func(s *Socket) {
		s.TLS = configs
		if serverName != "" {
			s.ServerName = serverName
		}
	}
}

// TLSConfigs hands out the TLS client configuration of one connection
// (tlsfiles.Loader).
type TLSConfigs interface {
	ClientConfig(serverName string) (*tls.Config, error)
}

// dial connects with a deadline of the Timeout (5 s when zero) plus extra,
// or the context's, whichever comes first.
func (s Socket) dial(ctx context.Context, extra time.Duration) (net.Conn, context.CancelFunc, error) {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+extra)
	d := net.Dialer{Timeout: 2 * time.Second} // a socket that takes longer to accept is down
	conn, err := d.DialContext(ctx, s.Network, s.Address)
	if err != nil {
		cancel()
		return nil, nil, &failure.NetworkError{Err: fmt.Errorf("dial %s: %w", s.Address, err)}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if s.TLS != nil {
		if conn, err = s.handshake(ctx, conn); err != nil {
			cancel()
			return nil, nil, err
		}
	}
	return conn, cancel, nil
}

// handshake runs the TLS handshake on conn, or closes it. Files that
// cannot be used are an InputError: Permanent until someone fixes them, and
// not "no such socket" for a certificate file that is missing. A server
// that refuses the client's certificate under TLS 1.3 says so only at the
// first read (failure.Of classes that alert too).
func (s Socket) handshake(ctx context.Context, conn net.Conn) (net.Conn, error) {
	cfg, err := s.TLS.ClientConfig(s.ServerName)
	if err != nil {
		conn.Close()
		return nil, &failure.InputError{Err: fmt.Errorf("TLS for %s: %w", s.Address, err)}
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, &failure.NetworkError{Err: fmt.Errorf("TLS handshake with %s: %w", s.Address, err)}
	}
	return tc, nil
}

// Step is one runtime command and the test its answer must pass.
type Step struct {
	Cmd string
	OK  func(answer string) bool
}

// Outcome is how far a sequence of steps went: Done steps passed; when
// Done is short of the sequence, Answer is the answer that stopped it.
type Outcome struct {
	Done   int
	Answer string
}

// maxReply bounds one reply; a longer one is an error, never cut silently.
const maxReply = 16 << 20

// Sequences runs sequences of steps on one interactive connection
// ("prompt"), in rounds: round k sends the k-th step of every sequence still
// going, then reads their answers, so a burst costs one round trip per step
// of the longest sequence, not one per command. A sequence stops at the
// first answer its step rejects: unlike the commands of one ';' line, which
// HAProxy runs all even after one failed, a later step never runs after an
// earlier one failed. Each sequence's steps must be safe to stop after.
//
// The error means the connection failed: the earlier rounds ran, the round
// in flight may have run in part. The connection's deadline is the Timeout
// plus a millisecond per step. In interactive mode HAProxy ends each
// command's answer with the prompt "\n> ", on 2.6 as on 3.x.
func (s Socket) Sequences(ctx context.Context, seqs [][]Step) ([]Outcome, error) {
	total := 0
	for _, seq := range seqs {
		for _, st := range seq {
			if _, err := line([]string{st.Cmd}); err != nil {
				return nil, err
			}
		}
		total += len(seq)
	}
	out := make([]Outcome, len(seqs))
	if total == 0 {
		return out, nil
	}
	conn, cancel, err := s.dial(ctx, time.Duration(total)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer conn.Close()
	r := &answers{conn: conn}
	if err := r.round(conn, []string{"prompt"}, func(int, string) {}); err != nil {
		return nil, err
	}
	going := make([]int, len(seqs)) // the sequences still going
	for i := range going {
		going[i] = i
	}
	for k := 0; len(going) > 0; k++ {
		var cmds []string
		var at []int
		for _, i := range going {
			if k < len(seqs[i]) {
				cmds = append(cmds, seqs[i][k].Cmd)
				at = append(at, i)
			}
		}
		if len(cmds) == 0 {
			break
		}
		going = going[:0]
		err := r.round(conn, cmds, func(j int, answer string) {
			i := at[j]
			if !seqs[i][k].OK(answer) {
				out[i].Answer = answer
				return
			}
			out[i].Done++
			going = append(going, i)
		})
		if err != nil {
			return out, fmt.Errorf("round %d of %d commands: %w", k+1, len(cmds), err)
		}
	}
	return out, nil
}

// answers reads prompt-terminated answers from an interactive connection.
type answers struct {
	conn  net.Conn
	buf   []byte
	chunk []byte
}

// window is how many commands a round keeps in flight: HAProxy reads an
// interactive connection's commands one at a time into a buffer of its own
// and answers into another; a client that pipelines hundreds, letting those
// buffers fill, is the pattern behind the CLI fixes after 3.2.0 (its applet
// spinning until the watchdog aborts the worker). A few in flight keep the
// round trip out of a burst's time.
const window = 16

// round writes cmds, one per line and at most window ahead of the answers,
// while it reads their answers and hands each to got, in order.
func (r *answers) round(conn net.Conn, cmds []string, got func(j int, answer string)) error {
	werr := make(chan error, 1)
	slots := make(chan struct{}, window)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for _, c := range cmds {
			select {
			case slots <- struct{}{}:
			case <-stop:
				werr <- nil
				return
			}
			if _, err := io.WriteString(conn, c+"\n"); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	const prompt = "\n> "
	if r.chunk == nil {
		r.chunk = make([]byte, 64<<10)
	}
	for j := 0; j < len(cmds); {
		if i := bytes.Index(r.buf, []byte(prompt)); i >= 0 {
			got(j, string(r.buf[:i+1]))
			r.buf = r.buf[i+len(prompt):]
			j++
			select { // one more may go
			case <-slots:
			default: // an answer the count did not expect: never wait on it
			}
			continue
		}
		if len(r.buf) > maxReply {
			return fmt.Errorf("runtime answer over %d bytes", maxReply)
		}
		n, err := r.conn.Read(r.chunk)
		r.buf = append(r.buf, r.chunk[:n]...)
		if err != nil && n == 0 {
			return &failure.NetworkError{Err: fmt.Errorf("read answers (%d of %d): %w", j, len(cmds), err)}
		}
	}
	if err := <-werr; err != nil {
		return &failure.NetworkError{Err: fmt.Errorf("send commands: %w", err)}
	}
	return nil
}
