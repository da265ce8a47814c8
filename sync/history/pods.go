package history

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// checkLines are the backend's check: a line sent, a line expected, so that
// every check that reaches a pod is seen by it.
var checkLines = []string{"option tcp-check", "tcp-check connect default", `tcp-check send hc\n`, "tcp-check expect string ok"}

// podAddr is pod n's address: its own local address, never reused within a
// history, so what reaches it is its alone: on loopback, or in the private
// network namespace the tests run in as root (privateNet), where
// Kubernetes takes it in an EndpointSlice (it refuses loopback ones).
func podAddr(n int) string {
	return fmt.Sprintf("%d.%d.%d.%d", podNet[0], podNet[1], 1+n/250, 1+n%250)
}

// privateNet says the tests run in a network namespace of their own
// (TestMain), where podNet and nodeNet are local addresses.
var privateNet bool

// podNet and nodeNet are the first bytes of the pods' and the Nodes'
// addresses: loopback ones, or in privateNet 10.244.0.0/16 and
// 10.250.0.0/24 (TestMain routes them to lo).
var (
	podNet  = [2]byte{127, 0}
	nodeNet = [3]byte{127, 0, 50}
)

// usePrivateNet gives pods and Nodes the private network's addresses.
func usePrivateNet() {
	privateNet, podNet, nodeNet = true, [2]byte{10, 244}, [3]byte{10, 250, 0}
}

// privateRoutes are the routes TestMain adds to lo in its namespace.
var privateRoutes = []string{"10.244.0.0/16", "10.250.0.0/24"}

// podName is pod n's name, and its server's name in pod mode.
func podName(n int) string { return fmt.Sprintf("p-%d", n) }

// pod is a pod's process: a TCP server that tells a health check from a
// client by the line each sends first. HAProxy's check sends "hc" and
// expects "ok" (checkLines): a bare connect would be invisible, as Go's
// Accept skips a connection HAProxy reset before it was accepted. A client
// sends "q" and reads the pod's name back; a session client sends "s" and
// stays (pod.session). Each connection is recorded with the time it was
// accepted.
type pod struct {
	n    int
	addr string
	rec  *recorder
	// proxy: every connection must start with a PROXY protocol v2 header
	// (what "default-server send-proxy-v2" gives servers and their checks);
	// one without is refused and recorded as a violation.
	proxy bool

	l listener
	// hole holds its address once it died as a black hole (blackHole).
	hole *blackHole

	// sessions are the long-lived client connections it holds open
	// (sessionClients); cut once it stops, as a process that exits does.
	sessMu   sync.Mutex
	sessions map[net.Conn]bool
	exiting  bool
	ended    time.Time // when its last session ended
}

// listener is a process that listens at one address and hands each
// connection, with when it was accepted, to handle; it says when it began
// and stopped listening (a pod's, a Node's kube-proxy).
type listener struct {
	mu sync.Mutex
	ln net.Listener
	wg sync.WaitGroup
}

// open listens at addr, unless it does: began is called before the first
// connection is accepted, so that what the connections record follows it.
func (l *listener) open(addr string, began func(), handle func(c net.Conn, at time.Time)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	l.ln = ln
	began()
	l.wg.Go(func() {
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			at := time.Now()
			conns.Go(func() { handle(c, at) })
		}
	})
	return nil
}

// close stops listening and waits for the connections to end; stopped
// (when it listened) is called with the moment it stopped: a connection
// the kernel accepted and it never took is reset then.
func (l *listener) close(stopped func(at time.Time), closing ...func()) {
	l.mu.Lock()
	ln := l.ln
	l.ln = nil
	l.mu.Unlock()
	if ln == nil {
		return
	}
	at := time.Now()
	_ = ln.Close()
	for _, f := range closing {
		f() // what the process held open goes with it
	}
	l.wg.Wait()
	stopped(at)
}

// up says whether it listens.
func (l *listener) up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ln != nil
}

// start makes the pod listen; a stopped pod can start again.
func (p *pod) start() error {
	p.l.mu.Lock()
	if p.hole != nil {
		p.hole.close()
		p.hole = nil
	}
	p.l.mu.Unlock()
	// The address a black hole held may be in use for a moment after it
	// closed (seen under the race detector: seed 1, serve, revive): the
	// harness's, not the service's, so tried again for up to a second.
	var err error
	p.sessMu.Lock()
	p.exiting = false
	p.sessMu.Unlock()
	for range 20 {
		err = p.l.open(p.addr, func() { p.rec.add(obs{kind: obsListen, pod: p.n}) }, p.handle)
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.addr, err)
	}
	return nil
}

// stop closes the listener: connections and checks to the pod are refused
// from now on (a process that died, or exited at the end of its grace).
func (p *pod) stop() {
	p.l.close(func(at time.Time) { p.rec.add(obs{at: at, kind: obsStop, pod: p.n}) }, p.cutSessions)
}

// cutSessions closes the sessions the pod holds, and any that would begin.
func (p *pod) cutSessions() {
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	p.exiting = true
	for c := range p.sessions {
		_ = c.Close()
	}
	clear(p.sessions)
}

// inSession says whether the pod holds a long-lived session open, or
// did within the draining follow-up's second and a reconcile's time: a
// parked server's end is seen by the service's next poll.
func (p *pod) inSession() bool {
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	return len(p.sessions) > 0 || time.Since(p.ended) < 2*time.Second
}

// sessionAt says whether a pod at address addr (its IP) holds a session
// open: its server, parked, waits for it to end (HAPROXY_DRAIN_TIMEOUT 0
// waits for good; a session lasts up to 18 s, past the 10 s converge
// bound).
func (w *world) sessionAt(addr string) bool {
	w.mu.Lock()
	var at []*pod
	for n, p := range w.pods {
		if w.addrOf(n) == addr {
			at = append(at, p)
		}
	}
	w.mu.Unlock()
	return slices.ContainsFunc(at, (*pod).inSession)
}

// session answers a long-lived client: its pod's name, then "p" for each
// "p" it sends, until it closes or the pod stops.
func (p *pod) session(c net.Conn, r *bufio.Reader) {
	p.sessMu.Lock()
	if p.exiting {
		p.sessMu.Unlock()
		return
	}
	if p.sessions == nil {
		p.sessions = map[net.Conn]bool{}
	}
	p.sessions[c] = true
	p.sessMu.Unlock()
	defer func() {
		p.sessMu.Lock()
		delete(p.sessions, c)
		p.ended = time.Now()
		p.sessMu.Unlock()
	}()
	if _, err := io.WriteString(c, podName(p.n)+"\n"); err != nil {
		return
	}
	for {
		_ = c.SetDeadline(time.Now().Add(sessionIdle))
		line, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "p" {
			return
		}
		if _, err := io.WriteString(c, "p\n"); err != nil {
			return
		}
	}
}

// die stops the pod and, as a black hole, holds its address so that
// connections to it are neither refused nor answered until it starts again.
func (p *pod) die(asBlackHole bool) error {
	p.stop()
	if !asBlackHole {
		return nil
	}
	h, err := openBlackHole(p.addr)
	if err != nil {
		return err
	}
	p.l.mu.Lock()
	p.hole = h
	p.l.mu.Unlock()
	return nil
}

// closeHole lets go of a black hole's address at the history's end.
func (p *pod) closeHole() {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	if p.hole != nil {
		p.hole.close()
		p.hole = nil
	}
}

// handle tells a check from a client and answers it.
func (p *pod) handle(c net.Conn, at time.Time) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	from := 0
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		for i, src := range sources {
			if a.IP.String() == src {
				from = i
			}
		}
	}
	r := bufio.NewReader(io.LimitReader(c, 4096))
	if p.proxy {
		ok, err := proxyHeader(r)
		if err != nil {
			return // dropped before it said anything
		}
		if !ok {
			p.rec.add(obs{at: at, kind: obsViolation, target: from, inv: DefaultServerKept,
				err: fmt.Sprintf("a connection without the PROXY v2 header that default-server send-proxy-v2 gives reached %s", podName(p.n))})
			return
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return // a connection dropped before it said what it is
	}
	switch l := strings.TrimSpace(line); {
	case l == "hc":
		p.rec.add(obs{at: at, kind: obsCheck, pod: p.n, target: from})
		_, _ = io.WriteString(c, "ok\n")
	case strings.HasPrefix(l, "GET ") && p.n == staticPod:
		// The backend's HTTP check (Setup.HealthPort) of the static
		// server, on its own port: it answers as a web server would.
		p.rec.add(obs{at: at, kind: obsCheck, pod: p.n, target: from})
		_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
	case l == "q":
		p.rec.add(obs{at: at, kind: obsClient, pod: p.n, target: from})
		_, _ = io.WriteString(c, podName(p.n)+"\n")
	case l == "s":
		p.rec.add(obs{at: at, kind: obsClient, pod: p.n, target: from})
		p.session(c, r)
	}
}

// proxyV2Sig starts every PROXY protocol v2 header.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// proxyHeader reads a PROXY protocol v2 header off r, and says whether
// there was one (false: the connection started with something else).
func proxyHeader(r *bufio.Reader) (bool, error) {
	// A check or a client without the header sends a short line and waits
	// for the answer: the first byte tells.
	first, err := r.Peek(1)
	if err != nil {
		return false, err
	}
	if first[0] != proxyV2Sig[0] {
		return false, nil
	}
	head, err := r.Peek(len(proxyV2Sig))
	if err != nil {
		return false, err
	}
	if !bytes.Equal(head, proxyV2Sig) {
		return false, nil
	}
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return false, err
	}
	_, err = r.Discard(int(binary.BigEndian.Uint16(fixed[14:16])))
	return err == nil, err
}
