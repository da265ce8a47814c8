package history

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Serve histories (Setup.Serve) run the product as shipped: the binary
// itself, `haproxy-k8s-sync serve`, with its own watch, coalescer,
// follow-up, reload watch, resync, Events and HTTP paths, against a real
// kube-apiserver the world writes its Kubernetes into (kube.go), configured
// by its environment alone; the one-shot command is the binary's
// `reconcile`. A crash is SIGKILL and a new process. What each process says
// of its reconciles is read from its log (JSON, as shipped) and what
// answers the HTTP callers, and judged as every writer's; a data race the
// race-built binary reports fails the history.

// serveBin is the binary, built once per test binary, with -race when the
// tests have it.
var serveBin struct {
	once sync.Once
	path string
	err  error
}

func serviceBinary(t testing.TB) string {
	t.Helper()
	serveBin.once.Do(func() {
		root := repoRoot()
		serveBin.path = filepath.Join(root, "bin", "history-haproxy-k8s-sync")
		args := []string{"build", "-trimpath", "-o", serveBin.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		if os.Getenv(coverDirEnv) != "" && os.Getenv(coverPkgEnv) != "" {
			// The main package too: a binary whose main is not counted
			// writes nothing into GOCOVERDIR (make soak leaves it out).
			args = append(args, "-cover", "-coverpkg="+os.Getenv(coverPkgEnv)+",./cmd/haproxy-k8s-sync")
		}
		cmd := exec.Command("go", append(args, "./cmd/haproxy-k8s-sync")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			serveBin.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if serveBin.err != nil {
		t.Fatal(serveBin.err)
	}
	return serveBin.path
}

// coverDirEnv and coverPkgEnv (make soak): the binary is built to count
// the coverage of these packages (a comma-separated list, as -coverpkg
// takes it, from the module's root), and writes it into that folder
// (GOCOVERDIR), for the soak's coverage line.
const (
	coverDirEnv = "HKS_HISTORY_COVERDIR"
	coverPkgEnv = "HKS_HISTORY_COVERPKG"
)

// webhookToken is WEBHOOK_TOKEN of serve histories: auth on, as shipped.
const webhookToken = "history-webhook-token"

// serveEnv is what writer i's process is given: the history's variables,
// a kubeconfig, its port (none: the one-shot command), a token, debug
// logs in JSON.
func (w *world) serveEnv(i int, port int) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "KUBECONFIG=" + w.kubeconfig,
		"WEBHOOK_AUTH=token", "WEBHOOK_TOKEN=" + webhookToken, "LOG_LEVEL=debug", "LOG_FORMAT=json"}
	if port > 0 {
		env = append(env, "PORT="+strconv.Itoa(port))
	}
	if dir := os.Getenv(coverDirEnv); dir != "" {
		env = append(env, "GOCOVERDIR="+dir)
	}
	for k, v := range w.envs[i] {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// startServe runs writer i's `serve` with cfgZone as HAPROXY_LOCAL_ZONE,
// and returns its process: poke does nothing (its watch sees Kubernetes),
// stop is SIGTERM (then SIGKILL), crash is SIGKILL.
func (w *world) startServe(i int, zone string) *process {
	w.t.Helper()
	port := freeTCPPort(w.t)
	w.serveStarts.Add(1)
	env := append(w.serveEnv(i, port), "HAPROXY_LOCAL_ZONE="+zone)
	return launchServe(w.t, env, port, w.serveLog(i), fmt.Sprintf("replica %d", i), w.cfg.ReconcileTimeout+5*time.Second)
}

// launchServe runs the binary's `serve` with env (listening on port), its
// output to lw, until the history stops (SIGTERM, then SIGKILL after
// stopWait) or crashes it (SIGKILL); one that exits by itself fails t, as
// who. It returns once serve listens.
func launchServe(t testing.TB, env []string, port int, lw *logLines, who string, stopWait time.Duration) *process {
	t.Helper()
	cmd := exec.Command(serviceBinary(t), "serve")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var ending sync.Mutex
	ended := false // stopped or crashed by the history
	go func() {
		err := cmd.Wait()
		lw.Close()
		ending.Lock()
		byUs := ended
		ending.Unlock()
		if !byUs {
			t.Errorf("%s: serve exited by itself: %v", who, err)
		}
		close(exited)
	}()
	var p *process
	end := func(sig syscall.Signal, wait time.Duration) {
		p.ended.Store(true)
		ending.Lock()
		ended = true
		ending.Unlock()
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(wait):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	p = &process{
		base:  fmt.Sprintf("http://127.0.0.1:%d", port),
		poke:  func() {},
		stop:  func() { end(syscall.SIGTERM, stopWait) },
		crash: func() { end(syscall.SIGKILL, 5*time.Second) },
	}
	t.Cleanup(p.stop)
	waitListening(t, p.base, exited)
	return p
}

// waitListening waits for serve's /healthz (not /readyz: a crash's
// successor while Kubernetes is unreachable is not ready until it is back,
// and the history goes on meanwhile).
func waitListening(t testing.TB, base string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatal("serve exited before it listened")
		default:
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("serve not listening within 60 s")
}

func freeTCPPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// logLines is a process's output: each line to the history's log, each
// reconcile it logs to the recorder as writer's, a data race to the test.
type logLines struct {
	pw   *io.PipeWriter
	done chan struct{}
}

func (l *logLines) Write(p []byte) (int, error) { return l.pw.Write(p) }

// Close ends the lines and waits until the last is read.
func (l *logLines) Close() { l.pw.Close(); <-l.done }

// serveLog is writer i's output: its lines to the history's log file (make
// replay LOG=…, make soak's folder), its reconciles to the recorder.
func (w *world) serveLog(i int) *logLines {
	return lineLog(w.t, fmt.Sprintf("replica %d", i), func(line []byte) { w.logged(i, line) })
}

// lineLog is a process's output: its lines to the history's log file, each
// to onLine, a data race the race-built binary reports to t, as who's.
func lineLog(t testing.TB, who string, onLine func(line []byte)) *logLines {
	pr, pw := io.Pipe()
	l := &logLines{pw: pw, done: make(chan struct{})}
	out := serviceLogFile(t)
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var race []string
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = out.Write(append(line, '\n'))
			switch {
			case bytes.HasPrefix(line, []byte("WARNING: DATA RACE")):
				race = append(race, string(line))
			case len(race) > 0 && len(race) < 60:
				race = append(race, string(line))
			default:
				onLine(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		if len(race) > 0 {
			t.Errorf("%s: the race detector found a data race in serve:\n%s", who, strings.Join(race, "\n"))
		}
	}()
	return l
}

// logLine is what a reconcile's log line says.
type logLine struct {
	Time       time.Time                `json:"time"`
	Msg        string                   `json:"msg"`
	Error      string                   `json:"error"`
	DurationMs float64                  `json:"durationMs"`
	Targets    []reconcile.TargetResult `json:"targets"`
}

// logged records a reconcile process i logged (pokes.go's "reconcile" and
// "reconcile failed").
func (w *world) logged(i int, line []byte) {
	if bytes.Contains(line, []byte(`"msg":"watch expired; listing again"`)) || bytes.Contains(line, []byte(`"msg":"watch failed; retrying"`)) && bytes.Contains(line, []byte("too old resource version")) {
		w.expired.Add(1)
	}
	if !bytes.Contains(line, []byte(`"msg":"reconcile`)) {
		return
	}
	var l logLine
	if json.Unmarshal(line, &l) != nil || l.Msg != "reconcile" && l.Msg != "reconcile failed" {
		return
	}
	began := l.Time.Add(-time.Duration(l.DurationMs * float64(time.Millisecond)))
	w.recordResult(i, l.Time, began, l.Error, l.Targets)
}

// recordResult records one reconcile of writer i, as writer.reconciled does
// for the histories' own loops.
func (w *world) recordResult(i int, at, began time.Time, err string, targets []reconcile.TargetResult) {
	o := obs{at: at, kind: obsReconcile, began: began, target: i, err: err}
	if err != "" {
		for _, t := range targets {
			if t.Error != "" {
				o.failures = append(o.failures, targetFailure{target: t.Target, err: t.Error, servers: serversOf(t.Failed)})
			}
		}
	}
	w.rec.add(o)
}

// postEvery is how many steps apart serve histories that draw the HTTP
// callers (Config.Posts) ask for a reconcile.
const postEvery = 3

// maybePost asks writer 0's serve for a reconcile at step index, in turn
// as curl does (POST /reconcile with the token) and as Knative delivers an
// ApiServerSource event of the Service's EndpointSlice (a binary
// CloudEvent); what answers is judged as the reconcile's result.
func (w *world) maybePost(index int) {
	if !w.setup.Config.Posts || index%postEvery != 0 {
		return
	}
	w.mu.Lock()
	proc := w.first
	w.mu.Unlock()
	base := proc.base
	w.posts.Go(func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/reconcile", nil)
		if index/postEvery%2 == 1 {
			body := fmt.Sprintf(`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"%s-0","namespace":"%s","labels":{"kubernetes.io/service-name":"%s"}}}`, service, namespace, service)
			req, _ = http.NewRequest(http.MethodPost, base+"/", strings.NewReader(body))
			for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": fmt.Sprintf("hist-%d", index),
				"Ce-Type": "dev.knative.apiserver.resource.update", "Ce-Source": "https://kubernetes.default",
				"Ce-Subject":   "/apis/discovery.k8s.io/v1/namespaces/" + namespace + "/endpointslices/" + service + "-0",
				"Content-Type": "application/json"} {
				req.Header.Set(k, v)
			}
		}
		req.Header.Set("Authorization", "Bearer "+webhookToken)
		began := time.Now()
		resp, err := (&http.Client{Timeout: w.cfg.ReconcileTimeout + 30*time.Second}).Do(req)
		if err != nil {
			if !proc.ended.Load() { // a process crashed or stopped under it answers nothing
				w.rec.add(obs{kind: obsReconcile, began: began, err: "POST: " + err.Error()})
			}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		var res reconcile.Result
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			// Too many callers queued: the documented answer, retried by them.
		case resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(body, &res) == nil && res.Targets == nil:
			// Not ready, or shutting down (a crash's successor starting).
		case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable:
			if err := json.Unmarshal(body, &res); err != nil {
				w.rec.add(obs{kind: obsReconcile, began: began, err: fmt.Sprintf("POST answered %d, not a result: %v", resp.StatusCode, err)})
				return
			}
			why := res.Error
			if resp.StatusCode != http.StatusOK {
				why = cmpOr(why, fmt.Sprintf("POST answered %d", resp.StatusCode))
			}
			w.recordResult(0, time.Now(), began, why, res.Targets)
		default:
			w.rec.add(obs{kind: obsReconcile, began: began, err: fmt.Sprintf("POST answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))})
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// oneShotBinary runs the binary's one-shot `reconcile` with writer 0's
// variables and zone, and returns its result and whether it failed on a
// target (its exit 1 for servers still waiting is not a failure).
func (w *world) oneShotBinary(ctx context.Context, zone string) (reconcile.Result, error) {
	cmd := exec.CommandContext(ctx, serviceBinary(w.t), "reconcile")
	cmd.Env = append(w.serveEnv(0, 0), "HAPROXY_LOCAL_ZONE="+zone)
	var stdout bytes.Buffer
	lw := w.serveLog(oneShotWriter)
	cmd.Stdout, cmd.Stderr = &stdout, lw
	err := cmd.Run()
	lw.Close()
	var res reconcile.Result
	var jerr error
	if w.setup.Services {
		res, jerr = fleetOneShot(stdout.Bytes())
	} else {
		jerr = json.Unmarshal(stdout.Bytes(), &res)
	}
	if jerr != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("reconcile printed no result (%v): %w", err, jerr)
	}
	var ee *exec.ExitError
	failed := slices.ContainsFunc(res.Targets, func(t reconcile.TargetResult) bool { return t.Error != "" })
	switch {
	case w.setup.Services && (failed || err != nil && errors.As(err, &ee) && ee.ExitCode() == 1):
		// Many-Services mode exits 0 when the Services that failed did so
		// for their own reasons (a server HAProxy refused: fleet's
		// Mendable), 1 when a retry can mend it: either way each failed
		// target is judged (second reader).
		return res, fmt.Errorf("%w: %s", reconcile.ErrTargets, cmp.Or(res.Error, "a Service's target failed"))
	case err == nil:
		return res, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		for _, t := range res.Targets {
			if t.Error != "" {
				return res, fmt.Errorf("%w: %s", reconcile.ErrTargets, t.Error)
			}
		}
		if strings.Contains(res.Error, reconcile.ErrContested.Error()) {
			return res, reconcile.ErrContested
		}
		if res.Error != "" {
			return res, errors.New(res.Error)
		}
		return res, reconcile.ErrStillWaiting
	}
	return res, fmt.Errorf("reconcile: %w", err)
}

// fleetOneShot is the result the reconcile command prints in many-Services
// mode (fleet.Result) as the judge reads a writer's: every Service's
// targets and every left backend's, a failed one's error naming its
// Service or backend, and the error.
func fleetOneShot(out []byte) (reconcile.Result, error) {
	var fr fleet.Result
	if err := json.Unmarshal(out, &fr); err != nil {
		return reconcile.Result{}, err
	}
	res := reconcile.Result{Status: fr.Status, Error: fr.Error}
	add := func(who string, targets []reconcile.TargetResult) {
		for _, t := range targets {
			if t.Error != "" {
				t.Error = who + ": " + t.Error
			}
			res.Targets = append(res.Targets, t)
		}
	}
	for _, sr := range fr.Services {
		add(sr.Service, sr.Targets)
	}
	for _, lr := range fr.Left {
		add("left backend "+lr.Backend, lr.Targets)
	}
	return res, nil
}

// startServeWorld starts a serve history's service: the API server holds
// the world's Kubernetes first, then each writer's serve starts with env
// (the second writer's with its own CLUSTER_NAME).
func (w *world) startServeWorld(env map[string]string) {
	t := w.t
	if !privateNet {
		t.Skip("serve histories run as root, in a network namespace of their own (TestMain): Kubernetes refuses loopback endpoints")
	}
	cfg, client := startKube(t)
	w.mirror = newKubeMirror(t, client)
	w.kproxy = startKubeProxy(t, hostPort(cfg.Host))
	w.kubeconfig = kubeconfigFile(t, cfg, w.kproxy.addr(), t.TempDir())
	if w.setup.Services {
		// serve's own fleet (watch.Many, lanes) runs web2 and web3.
		w.svc = newServices(w)
	}
	if err := w.mirror.set(context.Background(), w.kubeState()); err != nil {
		t.Fatal(err)
	}
	first := maps.Clone(env)
	delete(first, "HAPROXY_LOCAL_ZONE") // startServe's
	w.envs = []map[string]string{first}
	c := w.setup.Config
	if c.Writer2 != "" {
		second := maps.Clone(first)
		if c.Writer2 == "cluster" {
			second["CLUSTER_NAME"] = cluster2
		}
		w.envs = append(w.envs, second)
	}
	procs := []*process{w.startServe(0, w.local)}
	w.first = procs[0]
	if len(w.envs) > 1 {
		procs = append(procs, w.startServe(1, w.local))
	}
	w.poke = func() {} // serve's watch sees Kubernetes
	w.close = func() {
		w.mu.Lock()
		procs[0] = w.first
		w.mu.Unlock()
		for _, p := range procs {
			p.stop()
		}
		w.posts.Wait()
	}
}
