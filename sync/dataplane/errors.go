package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
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

// Conflict reports a lost optimistic-concurrency race: a version mismatch (409),
// an outdated transaction at commit (406), or a write into a transaction
// another writer's commit outdated (the real API answers it 400 "transaction
// does not exist": testdata/dataplaneapi). Re-read and re-plan, then retry.
func (e *APIError) Conflict() bool {
	return e.Status == http.StatusNotAcceptable ||
		e.Status == http.StatusConflict && strings.HasPrefix(e.Message, "version mismatch") ||
		e.Status == http.StatusBadRequest && strings.HasPrefix(e.Message, "transaction does not exist")
}

// Class is Temporary for conflicts, 429 and 5xx; other 4xx mean the request
// itself is wrong: Permanent, not retried.
func (e *APIError) Class() failure.Class {
	if e.Conflict() || e.Status == http.StatusTooManyRequests || e.Status >= 500 {
		return failure.Temporary
	}
	return failure.Permanent
}

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
