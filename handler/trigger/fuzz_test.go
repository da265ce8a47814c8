package trigger

import (
	"net/http"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bodies under each content type and CloudEvents
// mode: Parse must never panic, and must either fail with a 400/415 *Error
// or return a known Kind.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "events", "*.http"))
	for _, file := range files {
		name := filepath.Base(file)
		h, body := readRecorded(f, name[:len(name)-len(".http")])
		mode := uint8(0)
		switch {
		case h.Get("Ce-Specversion") != "":
			mode = 1
		case h.Get("Content-Type") == "application/cloudevents+json":
			mode = 2
		case h.Get("Content-Type") == "application/cloudevents-batch+json":
			mode = 3
		}
		f.Add(mode, body)
	}
	kinds := map[Kind]bool{Empty: true, JSON: true, Watch: true, CloudEvent: true, Batch: true}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		h := http.Header{}
		switch mode % 5 {
		case 0:
			h.Set("Content-Type", "application/json")
		case 1:
			h.Set("Ce-Specversion", "1.0")
			h.Set("Ce-Id", "1")
			h.Set("Ce-Type", "dev.knative.apiserver.resource.update")
			h.Set("Ce-Source", "s")
			h.Set("Ce-Subject", "/apis/discovery.k8s.io/v1/namespaces/ingress-nginx/endpointslices/x")
			h.Set("Content-Type", "application/json")
		case 2:
			h.Set("Content-Type", "application/cloudevents+json")
		case 3:
			h.Set("Content-Type", "application/cloudevents-batch+json")
		}
		tr, err := Parse(h, body, target)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || (e.Status != http.StatusBadRequest && e.Status != http.StatusUnsupportedMediaType) {
				t.Fatalf("error %v is not a 400/415 *Error", err)
			}
			return
		}
		if !kinds[tr.Kind] {
			t.Fatalf("unknown kind %q", tr.Kind)
		}
	})
}
