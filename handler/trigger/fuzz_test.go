package trigger

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// FuzzParse feeds arbitrary bodies under each content type and CloudEvents
// mode (form, multipart and text bodies included): Parse must never panic,
// must either fail with a 400/415 *Error quoting little of the input or
// return a known Kind, and form and text bodies are always pokes.
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
	f.Add(uint8(5), []byte("{}"))
	f.Add(uint8(6), []byte("--XYZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--XYZ--\r\n"))
	f.Add(uint8(7), []byte("poke"))
	kinds := map[Kind]bool{Empty: true, Text: true, JSON: true, Watch: true, CloudEvent: true, Batch: true}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		h := http.Header{}
		switch mode % 8 {
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
		case 5:
			h.Set("Content-Type", "application/x-www-form-urlencoded")
		case 6:
			h.Set("Content-Type", "multipart/form-data; boundary=XYZ")
		case 7:
			h.Set("Content-Type", "text/plain; charset=utf-8")
		}
		tr, err := Parse(h, body, target)
		// What a request says of the Services it concerns (many-Services
		// mode) is read from the same events: valid keys, or all.
		keys, all, kerr := Keys(h, body)
		if err == nil && kerr != nil {
			t.Fatalf("Parse read it but Keys refused it: %v", kerr)
		}
		for _, k := range keys {
			if !watch.ValidKey(k) {
				t.Fatalf("invalid key %q", k)
			}
		}
		if all && keys != nil {
			t.Fatalf("keys %v with all", keys)
		}
		if err != nil {
			e, ok := err.(*Error)
			if !ok || (e.Status != http.StatusBadRequest && e.Status != http.StatusUnsupportedMediaType) {
				t.Fatalf("error %v is not a 400/415 *Error", err)
			}
			if len(e.Msg) > 2*MaxQuote+100 {
				t.Fatalf("error of %d bytes quotes too much input", len(e.Msg))
			}
			if mode%8 >= 5 {
				t.Fatalf("a form or text body was refused: %v", err)
			}
			return
		}
		if mode%8 >= 5 && tr.Kind != Text && tr.Kind != Empty {
			t.Fatalf("a form or text body read as %s", tr.Kind)
		}
		if len(tr.Ignore) > 2*MaxQuote || len(tr.ID) > 2*MaxQuote || len(tr.Type) > 2*MaxQuote {
			t.Fatalf("a reason or id of %d/%d/%d bytes", len(tr.Ignore), len(tr.ID), len(tr.Type))
		}
		if !kinds[tr.Kind] {
			t.Fatalf("unknown kind %q", tr.Kind)
		}
	})
}
