package handler_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
)

// listeners are the two ways a listener reaches handler.Listen: serve's
// (silent connections wait in the kernel) and a plain one (they take
// slots and must be evicted).
var listeners = []struct {
	name   string
	listen func() (net.Listener, error)
}{
	{"ListenTCP", func() (net.Listener, error) { return handler.ListenTCP(context.Background(), "127.0.0.1:0") }},
	{"net.Listen", func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }},
}

// serveLimited serves h as serve does: handler.Server on handler.Listen,
// on the listener listen returns.
func serveLimited(t *testing.T, listen func() (net.Listener, error), h http.Handler) string {
	t.Helper()
	ln, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	s := handler.Server(ln.Addr().String(), h, 5*time.Second)
	limited := handler.Listen(ln, handler.MaxConns, s)
	go func() { _ = s.Serve(limited) }()
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String()
}

// probe asks /healthz the way the kubelet does: a new connection, an answer
// within its timeout (1 s, the kubelet's default).
func probe(addr string) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe answered %s", resp.Status)
	}
	return nil
}

// TestProbesAnsweredWhileConnectionsAreHeld: whoever reaches the port can
// open connections and hold them, idle after one request (keep-alive) or
// silent from the start; the kubelet's probe is still answered, since a
// connection doing no work gives its slot to a new one. Before, 64 idle
// keep-alive connections held every slot for the 60 s idle timeout and the
// probe timed out: the pod was restarted.
func TestProbesAnsweredWhileConnectionsAreHeld(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	for _, tt := range []struct {
		name string
		hold func(net.Conn) error
	}{
		{"idle after one request", func(c net.Conn) error {
			_, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
			return err
		}},
		{"silent", func(net.Conn) error { return nil }},
		{"headers never finished", func(c net.Conn) error {
			_, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n"))
			return err
		}},
	} {
		for _, l := range listeners {
			t.Run(tt.name+"/"+l.name, func(t *testing.T) {
				addr := serveLimited(t, l.listen, ok)
				var held []net.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				for range 200 {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, c)
					if err := tt.hold(c); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(300 * time.Millisecond) // the held ones are accepted and settle
				for i := range 5 {
					if err := probe(addr); err != nil {
						t.Fatalf("probe %d with 200 connections held: %v", i, err)
					}
				}
			})
		}
	}
}

// TestWorkingConnectionsAreNotCut: connections that are being answered
// keep their slots; only those doing nothing give them up.
func TestWorkingConnectionsAreNotCut(t *testing.T) {
	for _, l := range listeners {
		t.Run(l.name, func(t *testing.T) { testWorkingConnectionsAreNotCut(t, l.listen) })
	}
}

func testWorkingConnectionsAreNotCut(t *testing.T, listen func() (net.Listener, error)) {
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = w.Write([]byte("done"))
	})
	addr := serveLimited(t, listen, slow)
	const working = 10
	answers := make(chan string, working)
	for range working {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				answers <- err.Error()
				return
			}
			defer c.Close()
			_, _ = c.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- resp.Status
		}()
	}
	time.Sleep(200 * time.Millisecond)
	var held []net.Conn
	for range 200 { // silent connections push for slots
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range working {
		select {
		case a := <-answers:
			if !strings.HasPrefix(a, "200") {
				t.Errorf("a request being answered was cut: %s", a)
			}
		case <-ctx.Done():
			t.Fatal("answers missing")
		}
	}
}

// TestSlowWritersAreNotCut: clients that connect all at once and take longer
// than the eviction delay to write their request (a loaded client: seen
// with 400 callers under the race detector) are all answered. Before serve
// listened with ListenTCP, their connections took the slots silent and
// were cut after 250 ms.
func TestSlowWritersAreNotCut(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	addr := serveLimited(t, listeners[0].listen, ok)
	const callers = 3 * handler.MaxConns
	answers := make(chan string, callers)
	for range callers {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				answers <- err.Error()
				return
			}
			defer c.Close()
			time.Sleep(400 * time.Millisecond)
			_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- err.Error()
				return
			}
			resp.Body.Close()
			answers <- resp.Status
		}()
	}
	for range callers {
		if a := <-answers; !strings.HasPrefix(a, "200") {
			t.Errorf("a slow writer was not answered: %s", a)
		}
	}
}

// TestKeptAliveConnectionsGiveWayFirst: when every slot is taken, a new
// connection takes the slot of a connection kept alive after its answer
// (its client reconnects when it needs to) rather than that of an older one
// still sending its request.
func TestKeptAliveConnectionsGiveWayFirst(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	addr := serveLimited(t, listeners[1].listen, ok) // a plain listener: the slow one takes a slot
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for range handler.MaxConns - 1 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	time.Sleep(300 * time.Millisecond) // every idle one may now be evicted
	if err := probe(addr); err != nil {
		t.Fatalf("probe with every slot taken: %v", err)
	}
	if _, err := slow.Write([]byte("\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the connection still sending its request was cut: %v", err)
	}
	resp.Body.Close()
}
