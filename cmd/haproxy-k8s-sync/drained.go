package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
)

// drainAsk is how long one GET /drained asks the service to wait: short
// enough for any server's write timeout, so the command loops requests.
const drainAsk = 20 * time.Second

// minAsk is the shortest wait worth another request once an answer is in.
const minAsk = 100 * time.Millisecond

// askFor is how long to ask the service to wait with left before the
// command's timeout: a fifth of left (at most 5 s) is kept for the
// service's last read of HAProxy and its answer to arrive. The service
// answers only once the wait has passed, so asking for all of left would
// always be cut by the timeout, with no answer to show.
func askFor(left time.Duration) time.Duration {
	return min(drainAsk, left-min(left/5, 5*time.Second))
}

// waitDrainedCmd is `haproxy-k8s-sync wait-drained --node NAME|--ip ADDR
// [--timeout 5m] URL`: wait until the running service at URL says the
// server of that Node or pod is out of rotation with no sessions on every
// HAProxy target (GET /drained), for a preStop hook or a node-termination
// handler. It only asks; the service only reads. Exit 0 once drained, 1
// when the bound passed or the service refused (the last answer on
// stdout, one line on stderr), 2 on bad usage.
func waitDrainedCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wait-drained", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", "the Node whose server to wait for (node mode)")
	ip := fs.String("ip", "", "the address whose server to wait for: a pod IP (pod mode), or a Node's InternalIP")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	missingOK := fs.Bool("missing-ok", false, "count a server no HAProxy target has as drained (by default that is an error: a misspelt Node, a pod IP in node mode)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: haproxy-k8s-sync wait-drained (--node NAME | --ip ADDR) [--timeout 5m] [--missing-ok] URL   (e.g. http://haproxy-k8s-sync.ingress-nginx.svc)\n\n"+
			"Wait until the running service says that server is out of rotation with no sessions on every HAProxy target.\n\nFlags:")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 || (*node == "") == (*ip == "") || *timeout <= 0 {
		fs.Usage()
		return 2
	}
	u, err := serviceURL("wait-drained", fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if !strings.HasSuffix(u.Path, "/drained") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/drained"
	}
	token, err := callerToken()
	if err != nil {
		fmt.Fprintf(stderr, "wait-drained: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	q := url.Values{}
	if *node != "" {
		q.Set("node", *node)
	} else {
		q.Set("ip", *ip)
	}
	if *missingOK {
		q.Set("missingOk", "true")
	}
	answer, err := waitDrained(ctx, u, q, token)
	if len(answer) > 0 {
		_, _ = stdout.Write(answer)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wait-drained: %v\n", err)
		return 1
	}
	return 0
}

// waitDrained asks until the service answers drained, refuses for good, or
// ctx ends; it returns the last answer. A "waiting" answer is asked again
// at once (the service waited already); a network error, 429 or another
// 5xx after a backoff. A server no target has is an error (404) unless
// asked otherwise, or unless an earlier answer showed it: then it was
// deleted once drained.
func waitDrained(ctx context.Context, u *url.URL, q url.Values, token string) ([]byte, error) {
	client := &http.Client{Timeout: drainAsk + 25*time.Second}
	backoff := retry.WithJitterPercent(20, retry.WithCappedDuration(5*time.Second, retry.NewExponential(500*time.Millisecond)))
	var last []byte
	var lastErr error
	for {
		left := time.Until(deadline(ctx))
		if left <= 0 || last != nil && askFor(left) < minAsk {
			return last, fmt.Errorf("not drained after the timeout: %s", cmpErr(lastErr, summary(last)))
		}
		q.Set("wait", askFor(left).Round(time.Millisecond).String())
		u.RawQuery = q.Encode()
		code, body, err := send(ctx, client, http.MethodGet, u.String(), token)
		var ans drained.Answer
		switch {
		case err != nil && ctx.Err() != nil:
			continue // the bound cut this one: the last answer stands
		case err != nil:
			lastErr = err
		case code == http.StatusOK:
			return body, nil
		case code == http.StatusServiceUnavailable && json.Unmarshal(body, &ans) == nil && ans.Status == drained.StatusWaiting:
			last, lastErr = body, nil
			if present(ans) {
				q.Set("missingOk", "true") // seen: gone from now on means deleted
			}
			continue
		case code == http.StatusTooManyRequests || code >= 500:
			lastErr = &statusError{code: code, body: string(body)}
		default:
			return body, &statusError{code: code, body: string(body)}
		}
		wait, _ := backoff.Next()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// present reports whether some target has the server.
func present(ans drained.Answer) bool {
	for _, t := range ans.Targets {
		if t.State != drained.Absent && t.State != drained.Unknown {
			return true
		}
	}
	return false
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func cmpErr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// summary says, of a "waiting" answer, which targets hold the server.
func summary(body []byte) string {
	var ans drained.Answer
	if json.Unmarshal(body, &ans) != nil {
		return "no answer"
	}
	var held []string
	for _, t := range ans.Targets {
		if !t.Drained {
			s := fmt.Sprintf("%s/%s %s, %d sessions", t.Target, t.Backend, t.State, t.Sessions)
			if t.Error != "" {
				s += " (" + t.Error + ")"
			}
			held = append(held, s)
		}
	}
	return strings.Join(held, "; ")
}

// copyToCmd is `haproxy-k8s-sync copy-to DIR`: copy this executable into
// DIR (an emptyDir an init container shares), so that another container of
// the pod, whose image lacks it, can run `wait-drained` in its preStop hook.
// The image is distroless: there is no cp to do it.
func copyToCmd(args []string, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(stderr, "usage: haproxy-k8s-sync copy-to DIR")
		return 2
	}
	self, err := os.Executable()
	if err == nil {
		err = copyFile(self, filepath.Join(args[0], "haproxy-k8s-sync"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "copy-to: %v\n", err)
		return 1
	}
	return 0
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
