// Package auth decides whether a request may use the service's routes. Three
// modes, chosen explicitly by configuration:
//
//   - Token: a static bearer token, compared in constant time;
//   - Kubernetes: a bearer token verified by the Kubernetes TokenReview API
//     for an audience, optionally limited to some ServiceAccounts — a
//     projected ServiceAccount token (a CronJob) or Knative Eventing's OIDC
//     sender identity, with no shared secret;
//   - None: everyone (explicit, and warned about at start).
//
// Authenticators read only headers: a request's body is never read before it
// is authenticated. No error, log line or metric carries a token.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
)

// Authenticator checks a request's credentials.
type Authenticator interface {
	// Authenticate returns nil when the request may proceed, else an
	// *Error. source is the caller's address (IP), for per-caller limits.
	Authenticate(ctx context.Context, h http.Header, source string) error
	// Mode names the mode for logs and metrics.
	Mode() string
}

// Error is a refused request: 401 (no or bad credentials), 403 (known but
// not allowed), 429 (too many reviews at once) or 503 (cannot verify now).
type Error struct {
	Status int
	Reason string // a short word for metrics: missing, invalid, forbidden, busy, unavailable
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

var (
	errMissing = &Error{Status: http.StatusUnauthorized, Reason: "missing", Msg: "missing bearer token"}
	errInvalid = &Error{Status: http.StatusUnauthorized, Reason: "invalid", Msg: "invalid bearer token"}
)

// bearer returns the request's bearer token, or "".
func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return ""
	}
	return strings.TrimSpace(v[7:])
}

// MinTokenLength is the shortest static token accepted.
const MinTokenLength = 16

// Token accepts one static bearer token.
type Token struct{ sum [32]byte }

// NewToken returns a Token for token (trimmed), which must have at least
// MinTokenLength characters.
func NewToken(token string) (*Token, error) {
	token = strings.TrimSpace(token)
	if len(token) < MinTokenLength {
		return nil, fmt.Errorf("the token has %d characters, fewer than %d", len(token), MinTokenLength)
	}
	return &Token{sum: sha256.Sum256([]byte(token))}, nil
}

// Authenticate compares hashes in constant time, so neither the token's
// content nor its length leaks through timing.
func (t *Token) Authenticate(_ context.Context, h http.Header, _ string) error {
	got := bearer(h)
	if got == "" {
		return errMissing
	}
	sum := sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(sum[:], t.sum[:]) != 1 {
		return errInvalid
	}
	return nil
}

// Mode is "token".
func (t *Token) Mode() string { return "token" }

// None accepts every request.
type None struct{}

// Authenticate accepts.
func (None) Authenticate(context.Context, http.Header, string) error { return nil }

// Mode is "none".
func (None) Mode() string { return "none" }

// Review settings. Answers are kept apart: valid ones for the few real
// callers, refused ones for whatever else arrives, so made-up tokens can
// never push a valid answer out; each is dropped least recently used first.
const (
	// maxReviews bounds the TokenReviews in flight for tokens not seen
	// valid; more callers get 429.
	maxReviews = 8
	// knownReviews more are kept for tokens that were valid before and
	// whose answer expired, so a flood never takes a real caller's slot.
	knownReviews = 2
	// validSize and refusedSize bound the cached answers of each kind.
	validSize   = 1024
	refusedSize = 4096
	// cacheOK and cacheBad are how long an answer is reused: a valid token
	// for long enough to absorb a burst, a refused one briefly, so a flood of
	// the same bad token costs one review per interval.
	cacheOK  = 30 * time.Second
	cacheBad = 5 * time.Second
	// sourceRate and sourceBurst bound the reviews one source address may
	// cause: sourceBurst at once, then sourceRate a second. Cached answers
	// cost nothing.
	sourceRate  = 2.0
	sourceBurst = 8
	sourceSize  = 4096
)

// TokenReviewer creates TokenReviews; a *kube.Client is one.
type TokenReviewer interface {
	CreateTokenReview(ctx context.Context, tr *authnv1.TokenReview) (*authnv1.TokenReview, error)
}

// Kubernetes verifies bearer tokens with the TokenReview API.
type Kubernetes struct {
	client   TokenReviewer
	audience string
	// allowed are the usernames (system:serviceaccount:NS:NAME) that may
	// call; empty means any token the API server accepts for the audience.
	allowed map[string]bool
	now     func() time.Time
	slots   chan struct{} // reviews of tokens not seen valid
	known   chan struct{} // reviews of tokens seen valid before

	mu      sync.Mutex
	valid   *lru[[32]byte, time.Time] // token hash → valid until; kept expired as "seen valid"
	refused *lru[[32]byte, cached]
	sources *lru[string, bucket]
}

type cached struct {
	err   error
	until time.Time
}

// bucket is a source's review allowance (a token bucket).
type bucket struct {
	tokens float64
	at     time.Time
}

// NewKubernetes returns an authenticator that accepts tokens the API server
// validates for audience, from one of serviceAccounts ("namespace/name";
// none: any).
func NewKubernetes(client TokenReviewer, audience string, serviceAccounts []string) (*Kubernetes, error) {
	if audience == "" {
		return nil, errors.New("the audience must not be empty")
	}
	k := &Kubernetes{client: client, audience: audience, allowed: map[string]bool{}, now: time.Now,
		slots: make(chan struct{}, maxReviews), known: make(chan struct{}, knownReviews),
		valid: newLRU[[32]byte, time.Time](validSize), refused: newLRU[[32]byte, cached](refusedSize),
		sources: newLRU[string, bucket](sourceSize)}
	for _, sa := range serviceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("%q is not namespace/name", sa)
		}
		k.allowed["system:serviceaccount:"+ns+":"+name] = true
	}
	return k, nil
}

// Mode is "kubernetes".
func (k *Kubernetes) Mode() string { return "kubernetes" }

var errBusy = &Error{Status: http.StatusTooManyRequests, Reason: "busy", Msg: "too many token reviews at once"}

// Authenticate reviews the token, or reuses a recent answer for it.
func (k *Kubernetes) Authenticate(ctx context.Context, h http.Header, source string) error {
	tok := bearer(h)
	if tok == "" {
		return errMissing
	}
	key := sha256.Sum256([]byte(tok))
	now := k.now()
	k.mu.Lock()
	until, seenValid := k.valid.get(key)
	c, refused := k.refused.get(key)
	switch {
	case seenValid && now.Before(until):
		k.mu.Unlock()
		return nil
	case refused && now.Before(c.until):
		k.mu.Unlock()
		return c.err
	}
	// A token never seen valid spends its source's allowance; one seen
	// valid (its answer expired) does not, and has slots of its own.
	if !seenValid && !k.allow(source, now) {
		k.mu.Unlock()
		return &Error{Status: http.StatusTooManyRequests, Reason: "busy", Msg: "too many token reviews from this address"}
	}
	k.mu.Unlock()
	release, ok := k.slot(seenValid)
	if !ok {
		return errBusy
	}
	defer release()
	err := k.review(ctx, tok)
	var ae *Error
	if err != nil && !errors.As(err, &ae) {
		// The API server could not be asked: not the caller's fault, and
		// not cached.
		return &Error{Status: http.StatusServiceUnavailable, Reason: "unavailable", Msg: "cannot verify the token now"}
	}
	now = k.now()
	k.mu.Lock()
	if err == nil {
		k.valid.put(key, now.Add(cacheOK))
		k.refused.remove(key)
	} else {
		k.valid.remove(key)
		k.refused.put(key, cached{err: err, until: now.Add(cacheBad)})
	}
	k.mu.Unlock()
	return err
}

// slot takes a review slot: a known token's own first, then a shared one.
func (k *Kubernetes) slot(seenValid bool) (release func(), ok bool) {
	if seenValid {
		select {
		case k.known <- struct{}{}:
			return func() { <-k.known }, true
		default:
		}
	}
	select {
	case k.slots <- struct{}{}:
		return func() { <-k.slots }, true
	default:
		return nil, false
	}
}

// allow spends one review of source's allowance, if it has one; k.mu is
// held. Sources are kept least recently used first, so a flood of
// addresses forgets the oldest, which then start full again: the global
// bound on reviews in flight still holds.
func (k *Kubernetes) allow(source string, now time.Time) bool {
	b, ok := k.sources.get(source)
	if !ok {
		b = bucket{tokens: sourceBurst, at: now}
	}
	b.tokens = min(sourceBurst, b.tokens+now.Sub(b.at).Seconds()*sourceRate)
	b.at = now
	if b.tokens < 1 {
		k.sources.put(source, b)
		return false
	}
	b.tokens--
	k.sources.put(source, b)
	return true
}

func (k *Kubernetes) review(ctx context.Context, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tr, err := k.client.CreateTokenReview(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{k.audience}},
	})
	if err != nil {
		return fmt.Errorf("create tokenreview: %w", err)
	}
	st := tr.Status
	if !st.Authenticated || !contains(st.Audiences, k.audience) {
		return errInvalid
	}
	if len(k.allowed) > 0 && !k.allowed[st.User.Username] {
		return &Error{Status: http.StatusForbidden, Reason: "forbidden",
			Msg: fmt.Sprintf("%s may not call this service", short(st.User.Username))}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// short bounds a string taken from outside for an error message.
func short(s string) string { return cut.To(s, 100) }
