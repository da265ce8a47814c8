package trigger

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestKeysOfRecordedEvents: in many-Services mode, an ApiServerSource event
// about one Service or one of its EndpointSlices (Resource mode) concerns
// that Service alone; anything else is a full reconcile.
func TestKeysOfRecordedEvents(t *testing.T) {
	tests := []struct {
		file string
		keys []string // nil: a full reconcile
		err  bool
	}{
		{"apiserver-ref-binary-service-ours", []string{"ingress-nginx/ingress-nginx"}, false},
		{"apiserver-resource-binary-service-other", []string{"shop/web"}, false},
		{"apiserver-resource-binary-ours", []string{"ingress-nginx/ingress-nginx"}, false},
		{"apiserver-resource-structured-ours", []string{"ingress-nginx/ingress-nginx"}, false},
		{"apiserver-resource-binary-other-label", []string{"ingress-nginx/ingress-nginx-admission"}, false},
		{"batch-all-other", []string{"ingress-nginx/ingress-nginx-admission"}, false},
		{"batch-mixed", []string{"ingress-nginx/ingress-nginx", "ingress-nginx/ingress-nginx-admission"}, false},
		// Reference mode carries no labels: a slice's Service is not known.
		{"apiserver-ref-binary-ours", nil, false},
		{"apiserver-ref-binary-unattributable", nil, false},
		{"apiserver-ref-binary-other-namespace", nil, false},
		{"pingsource-binary", nil, false},
		{"pingsource-structured-base64", nil, false},
		{"curl-empty", nil, false},
		{"watch-modified-ours", nil, false},
		{"bad-structured-no-id", nil, true},
		{"bad-binary-data", nil, true},
		{"bad-batch-empty", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			h, body := readRecorded(t, tt.file)
			keys, all, err := Keys(h, body)
			switch {
			case tt.err:
				if err == nil {
					t.Fatalf("no error; keys %v all %v", keys, all)
				}
			case err != nil:
				t.Fatal(err)
			case tt.keys == nil && (!all || keys != nil):
				t.Errorf("keys %v all %v, want a full reconcile", keys, all)
			case tt.keys != nil && (all || !slices.Equal(keys, tt.keys)):
				t.Errorf("keys %v all %v, want %v", keys, all, tt.keys)
			}
		})
	}
}

func TestEventKey(t *testing.T) {
	slice := func(ns, svc string) json.RawMessage {
		return json.RawMessage(`{"kind":"EndpointSlice","metadata":{"namespace":"` + ns + `","name":"x-abcde","labels":{"kubernetes.io/service-name":"` + svc + `"}}}`)
	}
	tests := []struct {
		name string
		ce   Event
		key  string // "": not ok
	}{
		{"service by extensions", Event{Type: "dev.knative.apiserver.ref.delete", Kind: "Service", Namespace: "ns", Name: "web"}, "ns/web"},
		{"service by subject", Event{Type: "dev.knative.apiserver.ref.add", Kind: "Service", Subject: "/api/v1/namespaces/ns/services/web"}, "ns/web"},
		{"slice of a service", Event{Type: "dev.knative.apiserver.resource.update", Kind: "EndpointSlice", Data: slice("ns", "web")}, "ns/web"},
		{"slice without the label", Event{Type: "dev.knative.apiserver.resource.add", Kind: "EndpointSlice",
			Data: json.RawMessage(`{"kind":"EndpointSlice","metadata":{"namespace":"ns","name":"x"}}`)}, ""},
		{"slice label not a name", Event{Type: "dev.knative.apiserver.resource.add", Kind: "EndpointSlice", Data: slice("ns", "Web/../x")}, ""},
		{"service with a bad namespace", Event{Type: "dev.knative.apiserver.ref.add", Kind: "Service", Namespace: "ns/x", Name: "web"}, ""},
		{"service with an overlong name", Event{Type: "dev.knative.apiserver.ref.add", Kind: "Service", Namespace: "ns", Name: strings.Repeat("w", 64)}, ""},
		{"service without a name", Event{Type: "dev.knative.apiserver.ref.add", Kind: "Service", Namespace: "ns"}, ""},
		{"node", Event{Type: "dev.knative.apiserver.ref.update", Kind: "Node", Name: "n1"}, ""},
		{"ping", Event{Type: "dev.knative.sources.ping", Kind: "Service", Namespace: "ns", Name: "web"}, ""},
	}
	for _, tt := range tests {
		key, ok := EventKey(tt.ce)
		if ok != (tt.key != "") || key != tt.key {
			t.Errorf("%s: EventKey = %q %v, want %q", tt.name, key, ok, tt.key)
		}
	}
}
