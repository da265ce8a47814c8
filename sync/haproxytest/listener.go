package haproxytest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Listener is a TCP server that answers every connection with its name and
// closes it: a backend whose traffic can be counted.
type Listener struct {
	Name string
	Addr string
	ln   net.Listener
	hold bool
	mu   sync.Mutex
	hits int
	open []net.Conn
	wg   sync.WaitGroup
}

// Listen starts a listener on addr (host:port) until Close or the end of the test.
func Listen(t testing.TB, name, addr string) *Listener {
	t.Helper()
	return listen(t, name, addr, false)
}

// ListenHold is Listen, but connections stay open until Close: a backend with
// long-lived connections.
func ListenHold(t testing.TB, name, addr string) *Listener {
	t.Helper()
	return listen(t, name, addr, true)
}

func listen(t testing.TB, name, addr string, hold bool) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	l := &Listener{Name: name, Addr: addr, ln: ln, hold: hold}
	l.wg.Add(1)
	go l.serve()
	t.Cleanup(l.Close)
	return l
}

func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.hits++
		if l.hold {
			l.open = append(l.open, c)
		}
		l.mu.Unlock()
		_, _ = io.WriteString(c, l.Name+"\n")
		if !l.hold {
			c.Close()
		}
	}
}

// Hits counts accepted connections (health checks included).
func (l *Listener) Hits() int { l.mu.Lock(); defer l.mu.Unlock(); return l.hits }

// Close stops listening: HAProxy's checks to it now fail.
func (l *Listener) Close() {
	_ = l.ln.Close()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.open {
		c.Close()
	}
	l.open = nil
}

// Ask connects to a frontend and returns the name the backend answered.
func Ask(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if name == "" {
		return "", fmt.Errorf("no answer through %s", addr)
	}
	return name, nil
}

// Spread sends n connections through a frontend and counts the answers by
// backend name; failed connections count under "".
func Spread(addr string, n int) map[string]int {
	out := map[string]int{}
	for range n {
		name, err := Ask(addr)
		if err != nil {
			name = ""
		}
		out[name]++
	}
	return out
}

// StatField returns server's field in a "show stat" reply (CSV, its first
// line naming the fields); empty when either is not there.
func StatField(stat, server, field string) string {
	lines := strings.Split(stat, "\n")
	col := -1
	for i, name := range strings.Split(strings.TrimPrefix(lines[0], "# "), ",") {
		if name == field {
			col = i
		}
	}
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); col >= 0 && len(f) > col && f[1] == server {
			return f[col]
		}
	}
	return ""
}

// AskHTTP sends a GET through the frontend at addr with c and returns the
// name the server answered (its body, trimmed); a status other than 200 or
// an empty body is an error.
func AskHTTP(c *http.Client, addr string) (string, error) {
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s through %s: %.200s", resp.Status, addr, body)
	}
	name := strings.TrimSpace(string(body))
	if name == "" {
		return "", fmt.Errorf("no answer through %s", addr)
	}
	return name, nil
}
