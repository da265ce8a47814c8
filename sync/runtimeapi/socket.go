package runtimeapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Socket sends commands to an HAProxy runtime API socket (a "stats socket ...
// level admin", or the master socket), one connection per command: HAProxy
// answers a command, then closes a non-interactive connection.
type Socket struct {
	Network string // "unix" or "tcp"
	Address string
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
// commands). A line reaches HAProxy whole or not at all, so no failure can
// fall between them. The reply holds each command's answer followed by a
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
		return "", &networkError{fmt.Errorf("send %q: %w", cmd, err)}
	}
	// Half-close: the master socket waits for the end of input.
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	reply, err := io.ReadAll(io.LimitReader(conn, 16<<20))
	if err != nil {
		return "", &networkError{fmt.Errorf("read reply to %q: %w", cmd, err)}
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
		return nil, nil, &networkError{fmt.Errorf("dial %s: %w", s.Address, err)}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	return conn, cancel, nil
}

// networkError is a command that got no answer; worth retrying.
type networkError struct{ err error }

func (e *networkError) Error() string   { return e.err.Error() }
func (e *networkError) Unwrap() error   { return e.err }
func (e *networkError) Temporary() bool { return true }

// Pipeline sends many command lines on one connection in interactive mode
// ("prompt") without waiting for each answer, and returns each line's reply
// in the format Commands returns. Lines are written while replies are read,
// so neither side's buffer fills. In interactive mode HAProxy ends every
// command's answer (each of a line's ';'-separated commands) with the prompt
// "\n> ", on 2.6 as on 3.x. The connection's deadline is the Timeout plus a
// millisecond per command.
func (s Socket) Pipeline(ctx context.Context, lines [][]string) ([]string, error) {
	var b strings.Builder
	b.WriteString("prompt\n")
	total := 1 // the prompt command's own answer
	for _, cmds := range lines {
		l, err := line(cmds)
		if err != nil {
			return nil, err
		}
		b.WriteString(l + "\n")
		total += len(cmds)
	}
	conn, cancel, err := s.dial(ctx, time.Duration(total)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer conn.Close()
	werr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, b.String())
		werr <- err
	}()
	const prompt = "\n> "
	var answers []string
	var buf []byte
	chunk := make([]byte, 64<<10)
	for len(answers) < total {
		n, err := conn.Read(chunk)
		buf = append(buf, chunk[:n]...)
		for len(answers) < total {
			i := bytes.Index(buf, []byte(prompt))
			if i < 0 {
				break
			}
			answers = append(answers, string(buf[:i+1]))
			buf = buf[i+len(prompt):]
		}
		if len(buf) > 16<<20 {
			return nil, fmt.Errorf("runtime pipeline: an answer over 16 MB")
		}
		if err != nil && len(answers) < total {
			return nil, &networkError{fmt.Errorf("read pipelined replies (%d of %d): %w", len(answers), total, err)}
		}
	}
	if err := <-werr; err != nil {
		return nil, &networkError{fmt.Errorf("send pipelined commands: %w", err)}
	}
	out := make([]string, 0, len(lines))
	next := answers[1:]
	for _, cmds := range lines {
		var r strings.Builder
		for _, a := range next[:len(cmds)] {
			r.WriteString(a)
			r.WriteString("\n")
		}
		next = next[len(cmds):]
		out = append(out, strings.TrimRight(r.String(), "\n"))
	}
	return out, nil
}
