package history

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// obsKind is what an observation saw.
type obsKind int

const (
	obsListen         obsKind = iota // a pod began to listen
	obsStop                          // a pod stopped listening
	obsCheck                         // a health check reached a pod
	obsClient                        // a client connection reached a pod
	obsRequest                       // a client's request ended: answered by pod, or failed
	obsStep                          // a step was applied (step is its index)
	obsReload                        // HAProxy finished a reload nobody told the service of
	obsK8s                           // Kubernetes changed a pod's endpoint (state)
	obsViolation                     // a monitor saw a violation as it happened (inv, err)
	obsReloadStart                   // a reload by others begins
	obsHang                          // a target began (hung) or stopped hanging
	obsAPIReload                     // the Data Plane API reloaded HAProxy (what it wrote)
	obsAPIReloadStart                // the Data Plane API begins a reload
	obsAPIWrite                      // the Data Plane API got a write (refused: a fault answered it)
	obsGate                          // the readiness gate's verdict for a pod (gate), by replica target
	obsReconcile                     // a reconcile of replica target ended (err, failures; began)
	obsRefused                       // HAProxy refused a write for the refused pod's server (target)
	obsLocalZone                     // the service's HAPROXY_LOCAL_ZONE changed (err: the zone)
	obsNode                          // Node pod changed (gate: it serves; excluded: labelled out)
	obsReloadAsked                   // the Data Plane API was asked a reload (err: what asked it)
	obsKube                          // the API server became unreachable from the service (hung) or reachable again
	obsRestart                       // target's HAProxy was killed to restart (hung), or listens again
	obsDown                          // target's socket or API (err) refuses every connection (hung), or takes them again
	obsSession                       // a long-lived session through target to pod ended (began; err: how it was cut, empty: the client ended it)
	obsNodeEmpty                     // node mode: Node pod-nodeBase's kube-proxy had no pod that took a client of target
	obsWorkerCrash                   // target's master said a former worker crashed (seen within 100 ms)
)

// obs is one observation, as the history's recorder keeps it.
type obs struct {
	at    time.Time
	kind  obsKind
	pod   int      // the pod concerned; for obsRequest, the pod that answered (0: failed)
	step  int      // obsStep: the step's index
	state podState // obsK8s: the endpoint's new state (absent: removed)
	moved bool     // obsK8s: the pod took over a gone pod's name (its server moves)
	err   string
	inv   Invariant // obsViolation
	// target is the HAProxy target concerned: the one a request went
	// through, whose check or client reached a pod, that reloaded or hung.
	target int
	hung   bool // obsHang
	// obsReloadStart in slot histories: the server state was saved first,
	// and the pods whose servers were outside the slots (-1: unknown).
	saved    bool
	overflow []int
	refused  bool // obsAPIWrite
	// excluded (obsNode): the Node is labelled out of load balancers.
	excluded bool
	gate     bool // obsGate: in service on every target
	// obsReconcile: when it began, and what failed on which target;
	// a failed obsRequest: when it was sent.
	began    time.Time
	failures []targetFailure
}

// targetFailure is one target's failure in a reconcile: its error and the
// servers whose changes HAProxy refused.
type targetFailure struct {
	target  string
	err     string
	servers []string
}

// recorder keeps every observation of a history, in the order they came.
type recorder struct {
	mu  sync.Mutex
	all []obs
}

func (r *recorder) add(o obs) {
	if o.at.IsZero() {
		o.at = time.Now()
	}
	r.mu.Lock()
	r.all = append(r.all, o)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []obs {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]obs(nil), r.all...)
}

// clients send requests through the frontend at addr until ctx ends, each
// every interval, and record how each ended.
func clients(ctx context.Context, target int, addr string, n int, interval time.Duration, rec *recorder) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		every(ctx, &wg, interval, func() {
			at := time.Now()
			pod, err := ask(addr)
			o := obs{at: at, kind: obsRequest, pod: pod, target: target}
			if err != nil {
				// A failure is judged when it came: a request sent just
				// before a pod died fails because it died; when it was
				// sent is kept too (ExcuseDeathInFlight).
				o.at, o.began, o.err = time.Now(), at, err.Error()
			}
			rec.add(o)
		})
	}
	return wg.Wait
}

// every runs f every interval in a goroutine of wg until ctx ends.
func every(ctx context.Context, wg *sync.WaitGroup, interval time.Duration, f func()) {
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			f()
		}
	})
}

// ask sends one request through the frontend and returns the number of the
// pod that answered.
func ask(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	if _, err := io.WriteString(c, "q\n"); err != nil {
		return 0, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return 0, err
	}
	name := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(strings.TrimPrefix(name, "p-"))
	if err != nil || !strings.HasPrefix(name, "p-") {
		if name == "" {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, &unexpectedAnswer{name}
	}
	return n, nil
}

type unexpectedAnswer struct{ got string }

func (e *unexpectedAnswer) Error() string { return "unexpected answer " + strconv.Quote(e.got) }

// sessionIdle is how long either end of a session waits for the other's
// next line: well past the pings' interval on a loaded machine, within
// HAProxy's timeout client and server (10 s).
const sessionIdle = 5 * time.Second

// sessionClients, n of them, each hold one long-lived session at a time through the
// frontend at addr until ctx ends: a client that stays connected 3 to 18 s
// (a websocket, a database connection, a stream), saying something every
// 200 ms. How each ended is recorded: cut (by whom the judge decides,
// sessionsEvaluate) or ended by the client.
func sessionClients(ctx context.Context, target int, addr string, n int, rec *recorder) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !session(ctx, target, addr, rec) {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	return wg.Wait
}

// session holds one session; false when none began (no pod answered).
func session(ctx context.Context, target int, addr string, rec *recorder) bool {
	began := time.Now()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	if _, err := io.WriteString(c, "s\n"); err != nil {
		return false
	}
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	n, convErr := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(name), "p-"))
	if err != nil || convErr != nil {
		return false // judged as the requests are: a session that never began is not one
	}
	until := began.Add(3*time.Second + rand.N(15*time.Second))
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	cut := ""
	for cut == "" && time.Now().Before(until) {
		select {
		case <-ctx.Done():
			until = time.Now()
			continue
		case <-t.C:
		}
		_ = c.SetDeadline(time.Now().Add(sessionIdle))
		if _, err := io.WriteString(c, "p\n"); err != nil {
			cut = err.Error()
			break
		}
		line, err := r.ReadString('\n')
		switch {
		case err != nil:
			cut = err.Error()
		case strings.TrimSpace(line) != "p":
			cut = "unexpected answer " + strconv.Quote(line)
		}
	}
	rec.add(obs{kind: obsSession, began: began, pod: n, target: target, err: cut})
	return true
}
