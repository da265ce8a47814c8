package trigger

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var target = Target{Namespace: "ingress-nginx", Service: "ingress-nginx", NodeMode: true}

// readRecorded reads a request recorded in testdata/events.
func readRecorded(t testing.TB, name string) (http.Header, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "events", name+".http"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body, _ := io.ReadAll(req.Body)
	return req.Header, body
}

func TestParseRecordedEvents(t *testing.T) {
	const reconcile, ignored = "reconcile", "ignored"
	tests := []struct {
		file    string
		kind    Kind
		outcome string // reconcile, ignored, or the HTTP status of the error
		typ     string
	}{
		{"apiserver-ref-binary-ours", CloudEvent, reconcile, "dev.knative.apiserver.ref.update"},
		// A Reference-mode event carries no labels: its slice may be
		// ours whatever its name, unless ENDPOINTSLICE_MANAGED_BY chose
		// a Kubernetes controller, which names slices after the Service.
		{"apiserver-ref-binary-unattributable", CloudEvent, reconcile, "dev.knative.apiserver.ref.add"},
		{"apiserver-ref-binary-other-namespace", CloudEvent, ignored, "dev.knative.apiserver.ref.delete"},
		{"apiserver-resource-binary-ours", CloudEvent, reconcile, "dev.knative.apiserver.resource.update"},
		{"apiserver-resource-binary-other-label", CloudEvent, ignored, "dev.knative.apiserver.resource.add"},
		{"apiserver-resource-structured-ours", CloudEvent, reconcile, "dev.knative.apiserver.resource.update"},
		{"apiserver-ref-binary-service-ours", CloudEvent, reconcile, "dev.knative.apiserver.ref.update"},
		{"apiserver-resource-binary-service-other", CloudEvent, ignored, "dev.knative.apiserver.resource.update"},
		{"pingsource-binary", CloudEvent, reconcile, "dev.knative.sources.ping"},
		{"pingsource-binary-no-data", CloudEvent, reconcile, "dev.knative.sources.ping"},
		{"pingsource-structured-base64", CloudEvent, reconcile, "dev.knative.sources.ping"},
		{"batch-mixed", Batch, reconcile, "dev.knative.apiserver.resource.update"},
		{"batch-all-other", Batch, ignored, "dev.knative.apiserver.resource.update"},
		{"watch-modified-ours", Watch, reconcile, "MODIFIED"},
		{"watch-added-other-namespace", Watch, ignored, "ADDED"},
		{"watch-bookmark", Watch, ignored, "BOOKMARK"},
		{"watch-error", Watch, reconcile, "ERROR"},
		{"curl-empty", Empty, reconcile, ""},
		{"cronjob-empty-object", JSON, reconcile, ""},
		{"curl-form-text", Text, reconcile, ""},
		{"bad-structured-no-id", "", "400", ""},
		{"bad-structured-specversion", "", "400", ""},
		{"bad-structured-base64", "", "400", ""},
		{"bad-binary-data", "", "400", ""},
		{"bad-binary-no-source", "", "400", ""},
		{"bad-json", "", "400", ""},
		{"bad-json-array", "", "400", ""},
		{"bad-watch-type", "", "400", ""},
		{"bad-batch-empty", "", "400", ""},
		{"bad-content-type", "", "415", ""},
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "events", "*.http"))
	if len(files) != len(tests) {
		t.Errorf("%d recorded files, %d test rows: every file needs a row", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			h, body := readRecorded(t, tt.file)
			tr, err := Parse(h, body, target)
			var perr *Error
			switch {
			case err != nil && errors.As(err, &perr):
				if strconv.Itoa(perr.Status) != tt.outcome {
					t.Fatalf("error %d %v, want %s", perr.Status, err, tt.outcome)
				}
				return
			case err != nil:
				t.Fatalf("error %v is not a *trigger.Error", err)
			}
			got := reconcile
			if tr.Ignore != "" {
				got = ignored
			}
			if got != tt.outcome || tr.Kind != tt.kind || tr.Type != tt.typ {
				t.Errorf("got %s kind %s type %q (%+v), want %s %s %q", got, tr.Kind, tr.Type, tr, tt.outcome, tt.kind, tt.typ)
			}
			if tr.Kind == CloudEvent && (tr.ID == "" || tr.Source == "") {
				t.Errorf("cloudevent id/source not read: %+v", tr)
			}
		})
	}
}

func TestIgnoreRules(t *testing.T) {
	pod := Target{Namespace: "ns", Service: "web"}
	// Only slices of Kubernetes' own controllers are named after their
	// Service: with one of those chosen, a name says whose a slice is.
	kube := Target{Namespace: "ns", Service: "web", ManagedBy: "endpointslice-controller.k8s.io"}
	mirrored := Target{Namespace: "ns", Service: "web", ManagedBy: "endpointslicemirroring-controller.k8s.io"}
	custom := Target{Namespace: "ns", Service: "web", ManagedBy: "my-controller"}
	long := Target{Namespace: "ns", Service: strings.Repeat("s", 70), ManagedBy: "endpointslice-controller.k8s.io"}
	tests := []struct {
		name   string
		ref    objectRef
		target Target
		ignore bool
	}{
		{"our slice by name", objectRef{kind: "EndpointSlice", namespace: "ns", name: "web-x1y2z"}, pod, false},
		{"a slice named after a longer service", objectRef{kind: "EndpointSlice", namespace: "ns", name: "webshop-x1y2z"}, kube, true},
		{"a mirrored slice named after another service", objectRef{kind: "EndpointSlice", namespace: "ns", name: "api-x1y2z"}, mirrored, true},
		{"any slice by reference, any controller counting", objectRef{kind: "EndpointSlice", namespace: "ns", name: "webshop-x1y2z"}, pod, false},
		{"a custom controller's slice by reference", objectRef{kind: "EndpointSlice", namespace: "ns", name: "edge-pool-1"}, custom, false},
		{"a slice by reference in another namespace", objectRef{kind: "EndpointSlice", namespace: "other", name: "web-x1y2z"}, custom, true},
		{"slice with our label but a custom name (full object)", objectRef{kind: "EndpointSlice", namespace: "ns", name: "custom", full: true, labels: map[string]string{"kubernetes.io/service-name": "web"}}, pod, false},
		{"full slice without labels", objectRef{kind: "EndpointSlice", namespace: "ns", name: "web-abcde", full: true}, pod, true},
		{"slice without name or namespace", objectRef{kind: "EndpointSlice"}, pod, false},
		{"truncated generateName of a long service", objectRef{kind: "EndpointSlice", namespace: "ns", name: strings.Repeat("s", 58) + "abcde"}, long, false},
		{"our service", objectRef{kind: "Service", namespace: "ns", name: "web"}, pod, false},
		{"another service", objectRef{kind: "Service", namespace: "ns", name: "api"}, pod, true},
		{"node in pod mode", objectRef{kind: "Node", name: "n1"}, pod, true},
		{"node in node mode", objectRef{kind: "Node", name: "n1"}, Target{Namespace: "ns", Service: "web", NodeMode: true}, false},
		{"unknown kind", objectRef{kind: "Pod", namespace: "other", name: "x"}, pod, false},
	}
	for _, tt := range tests {
		if got := tt.ref.ignore(tt.target) != ""; got != tt.ignore {
			t.Errorf("%s: ignore = %v, want %v", tt.name, got, tt.ignore)
		}
	}
}
