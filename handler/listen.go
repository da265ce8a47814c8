package handler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// MaxConns bounds the connections served at once. It is well above
// MaxWaiters + MaxDryRuns, so connections are always left for probes and
// for answering the excess at once.
const MaxConns = 64

// evictAfter is how long a connection may do nothing before a new one may
// take its slot: long enough for a fresh connection's request to arrive.
const evictAfter = 250 * time.Millisecond

// deferAcceptFor is how long the kernel keeps a connection that sent
// nothing away from Accept; ReadHeaderTimeout would cut it soon after.
const deferAcceptFor = 5 // seconds

// ListenTCP listens on addr for Listen: on Linux, a connection reaches
// Accept only once its client wrote something (TCP_DEFER_ACCEPT).
func ListenTCP(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = deferAccept(fd, deferAcceptFor) }); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("set TCP_DEFER_ACCEPT: %w", err)
		}
		return nil
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// Listen returns ln serving at most max connections at once for s; it sets
// s.ConnContext and wraps s.Handler to know which connections are working.
//
// Only a connection whose request is being handled keeps its slot for
// sure. When every slot is taken, a new connection takes the slot of one
// that has done nothing for evictAfter: first of a connection idle after a
// request (kept alive: its client reconnects when it needs to), else of the
// one silent or still sending its headers longest. (Listening with
// ListenTCP keeps connections that sent nothing out of the slots at all.) So
// whoever reaches the port cannot starve the kubelet's probes by holding
// connections: requests doing work are bounded by MaxWaiters and
// MaxDryRuns, the rest answer at once. A closed idle keep-alive connection
// is what a client sees after the server's IdleTimeout anyway.
func Listen(ln net.Listener, max int, s *http.Server) net.Listener {
	l := &limitListener{Listener: ln, max: max, conns: map[*trackedConn]bool{},
		freed: make(chan struct{}, 1), done: make(chan struct{})}
	inner := s.Handler
	s.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*trackedConn); ok {
			return context.WithValue(ctx, connKey{}, tc)
		}
		return ctx
	}
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			l.setBusy(tc, true)
			defer l.setBusy(tc, false)
		}
		inner.ServeHTTP(w, r)
	})
	return l
}

type connKey struct{}

type limitListener struct {
	net.Listener
	max   int
	mu    sync.Mutex
	conns map[*trackedConn]bool // the connections served; a set
	freed chan struct{}         // a slot was freed
	done  chan struct{}
	once  sync.Once
}

// trackedConn is a served connection: busy while a request is handled,
// since when it has been doing nothing otherwise.
type trackedConn struct {
	net.Conn
	l      *limitListener
	busy   bool
	served bool // answered a request: idle means kept alive
	since  time.Time
	once   sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

func (l *limitListener) release(c *trackedConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

func (l *limitListener) setBusy(c *trackedConn, busy bool) {
	l.mu.Lock()
	c.busy, c.since = busy, time.Now()
	c.served = c.served || !busy
	l.mu.Unlock()
}

// Accept accepts a connection, then waits for a slot, taking the slot of
// the connection that has done nothing longest when it may.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		now := time.Now()
		l.mu.Lock()
		if len(l.conns) < l.max {
			tc := &trackedConn{Conn: c, l: l, since: now}
			l.conns[tc] = true
			l.mu.Unlock()
			return tc, nil
		}
		victim, wait := l.victim(now)
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-l.freed:
		case <-t.C:
		case <-l.done:
			t.Stop()
			_ = c.Close()
			return nil, net.ErrClosed
		}
		t.Stop()
	}
}

// victim returns a connection that has done nothing for evictAfter or
// more, kept-alive ones first, else how long to wait before asking again;
// l.mu is held.
func (l *limitListener) victim(now time.Time) (*trackedConn, time.Duration) {
	var oldest *trackedConn
	for c := range l.conns {
		if c.busy {
			continue
		}
		if c.served && now.Sub(c.since) >= evictAfter {
			return c, 0
		}
		if oldest == nil || c.since.Before(oldest.since) {
			oldest = c
		}
	}
	if oldest == nil {
		return nil, evictAfter // every slot works: wait for one to end
	}
	if age := now.Sub(oldest.since); age < evictAfter {
		return nil, evictAfter - age
	}
	return oldest, 0
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
