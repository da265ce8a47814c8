package dataplane_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func getVersion(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/v3/services/haproxy/configuration/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
