package haproxytest

import (
	"os"
	"path/filepath"
	"testing"
)

// SetSections writes whole sections (frontends, backends: what a Data Plane
// API created) at the end of haproxy.cfg, for the next Reload; they replace
// those of the previous call.
func (h *HAProxy) SetSections(t testing.TB, text string) {
	t.Helper()
	if err := h.TrySetSections(text); err != nil {
		t.Fatal(err)
	}
}

// TrySetSections is SetSections for a goroutine that cannot fail a test.
func (h *HAProxy) TrySetSections(text string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sections = text
	return h.writeConfig()
}

// Config returns haproxy.cfg as last written.
func (h *HAProxy) Config() (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir, "haproxy.cfg"))
	return string(b), err
}
