package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// APIError is a non-2xx answer of the Data Plane API.
type APIError struct {
	Method  string
	Path    string
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, e.Message)
}

// Conflict reports a lost optimistic-concurrency race: a version mismatch (409)
// or an outdated transaction at commit (406). Re-read and re-plan, then retry.
func (e *APIError) Conflict() bool {
	return e.Status == http.StatusNotAcceptable ||
		e.Status == http.StatusConflict && strings.HasPrefix(e.Message, "version mismatch")
}

// Temporary reports whether trying again later may succeed: conflicts, 429 and 5xx.
// Other 4xx mean the request itself is wrong and fail fast.
func (e *APIError) Temporary() bool {
	return e.Conflict() || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// networkError is a request that got no HTTP answer; always worth retrying.
type networkError struct{ err error }

func (e *networkError) Error() string   { return e.err.Error() }
func (e *networkError) Unwrap() error   { return e.err }
func (e *networkError) Temporary() bool { return true }

// conflictError is a conflict seen by the client itself (two reads at different
// versions), treated like the API's 409.
type conflictError struct{ msg string }

func (e *conflictError) Error() string   { return e.msg }
func (e *conflictError) Temporary() bool { return true }

// decodeError reads an error body leniently: client-native's models.Error
// refuses bodies whose extra fields are not strings, and proxies in front of
// the API may answer plain text.
func decodeError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: status}
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &m) == nil && m.Message != "" {
		e.Message = m.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}
