package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// maxAnswer bounds what trigger reads of an answer.
const maxAnswer = 1 << 20

// triggerCmd is `haproxy-k8s-sync trigger URL`: POST an empty poke to a
// running service, with the bearer token of WEBHOOK_TOKEN or
// WEBHOOK_TOKEN_FILE, retrying network errors, 429 and 5xx with backoff until
// --timeout. It prints the service's answer on stdout and exits 0 on 2xx, 1
// on failure (with one line on stderr saying why), 2 on bad usage.
func triggerCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trigger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", time.Minute, "give up after this long, retries included")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: haproxy-k8s-sync trigger [--timeout 1m] URL   (e.g. http://haproxy-k8s-sync.ingress-nginx.svc/reconcile)\n\n"+
			"POST a poke to a running service with WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE; a URL without a scheme is taken as http://.\n\nFlags:")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	u, err := serviceURL("trigger", fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	token, err := callerToken()
	if err != nil {
		fmt.Fprintf(stderr, "trigger: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	answer, err := post(ctx, u.String(), token)
	if err != nil {
		fmt.Fprintf(stderr, "trigger: POST %s: %v\n", u.Redacted(), err)
		return 1
	}
	_, _ = stdout.Write(answer)
	return 0
}

// callerToken is the webhook token the commands that call the service send
// (WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE). With none, the call could only
// be refused with 401, so it is an error here and now, unless WEBHOOK_AUTH
// says the service runs without auth.
func callerToken() (string, error) {
	token, err := config.WebhookTokenFromEnv()
	if err != nil {
		return "", err
	}
	if token == "" && os.Getenv("WEBHOOK_AUTH") != config.AuthNone {
		return "", errors.New("no webhook token: set WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE to the service's token " +
			"(with WEBHOOK_AUTH=kubernetes, WEBHOOK_TOKEN_FILE to a projected ServiceAccount token), or WEBHOOK_AUTH=none if the service runs without auth")
	}
	return token, nil
}

// maxErrorBody bounds the answer a failure quotes: a whole JSON error,
// with every target's error, fits.
const maxErrorBody = 4 << 10

// statusError is a non-2xx answer.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), cut.To(strings.TrimSpace(e.body), maxErrorBody))
}

// permanent reports whether a failed reconcile's answer says that trying
// again cannot help until someone changes the configuration
// (errorClass "permanent": a backend HAProxy cannot manage as configured).
func permanent(body []byte) bool {
	var res struct {
		ErrorClass failure.Class `json:"errorClass"`
	}
	return json.Unmarshal(body, &res) == nil && res.ErrorClass == failure.Permanent
}

// post POSTs an empty body until a 2xx, a final answer or ctx's end.
func post(ctx context.Context, target, token string) ([]byte, error) {
	client := &http.Client{Timeout: 45 * time.Second}
	b := retry.WithJitterPercent(20, retry.WithCappedDuration(10*time.Second, retry.NewExponential(500*time.Millisecond)))
	var answer []byte
	var last error
	attempts := 0
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		attempts++
		code, body, err := send(ctx, client, http.MethodPost, target, token)
		if err != nil {
			if ctx.Err() == nil {
				last = err
			}
			return retry.RetryableError(err)
		}
		if code/100 == 2 {
			answer = body
			return nil
		}
		last = &statusError{code: code, body: string(body)}
		if (code == http.StatusTooManyRequests || code >= 500) && !permanent(body) {
			return retry.RetryableError(last)
		}
		return last
	})
	if err != nil {
		if ctx.Err() != nil && last != nil && !errors.Is(err, last) {
			return nil, fmt.Errorf("gave up after %d attempts: %w", attempts, last)
		}
		return nil, err
	}
	return answer, nil
}

// send makes one request with an empty body and the bearer token, and reads
// at most maxAnswer of the answer.
func send(ctx context.Context, client *http.Client, method, target, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, http.NoBody)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, nil
}

// serviceURL checks the URL a command is given: http(s), no credentials.
// Without a scheme (127.0.0.1:8080, haproxy-k8s-sync.ingress-nginx.svc) it
// is taken as http://.
func serviceURL(cmd, raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: the URL cannot be parsed: want http(s)://HOST[:PORT][/PATH], e.g. http://127.0.0.1:8080", cmd)
	case u.User != nil:
		return nil, fmt.Errorf("%s: %q: put no credentials in the URL; use WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE", cmd, trigger.Short(u.Redacted()))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, fmt.Errorf("%s: %q is not an http(s) URL", cmd, trigger.Short(u.Redacted()))
	}
	return u, nil
}
