package trigger

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// Event is one CloudEvent, reduced to what says which object it is
// about.
type Event struct {
	ID, Type, Source, Subject string
	// Kind, Name and Namespace are the ApiServerSource's extensions.
	Kind, Name, Namespace string
	// Data is the event's JSON data, nil when absent or not JSON.
	Data json.RawMessage
}

func (e event) export() Event {
	return Event{ID: e.id, Type: e.typ, Source: e.source, Subject: e.subject,
		Kind: e.ext["kind"], Name: e.ext["name"], Namespace: e.ext["namespace"], Data: e.data}
}

// EventKey says which Service a CloudEvent concerns, in many-Services mode:
// the "namespace/name" of a Service an ApiServerSource event is about, or of
// the Service an EndpointSlice event's kubernetes.io/service-name label
// names (Resource mode, which carries the whole object). ok is false when
// the event names no Service for sure — a PingSource tick, a Node, an
// EndpointSlice in Reference mode (no labels; a slice's name does not say its
// Service for sure) — and then every Service is reconciled.
func EventKey(ce Event) (key string, ok bool) {
	if !strings.HasPrefix(ce.Type, "dev.knative.apiserver.") {
		return "", false
	}
	ref := objectRef{kind: ce.Kind, namespace: ce.Namespace, name: ce.Name}
	ref.fromSubject(ce.Subject)
	if ce.Data != nil {
		var obj k8sObject
		if json.Unmarshal(ce.Data, &obj) == nil {
			ref.merge(obj.ref())
		}
	}
	switch ref.kind {
	case "Service":
		key = ref.namespace + "/" + ref.name
	case "EndpointSlice":
		svc := ref.labels["kubernetes.io/service-name"]
		if !ref.full || svc == "" {
			return "", false
		}
		key = ref.namespace + "/" + svc
	default:
		return "", false
	}
	if !watch.ValidKey(key) {
		return "", false
	}
	return key, true
}

// Events reads the CloudEvents of a request (binary, structured or batch
// mode); a request that is no CloudEvent has none. Errors are Parse's.
func Events(h http.Header, body []byte) ([]Event, error) {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case mt == "application/cloudevents-batch+json":
		var list []structured
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, bad("malformed cloudevents batch: %v", err)
		}
		if len(list) == 0 {
			return nil, bad("empty cloudevents batch")
		}
		out := make([]Event, 0, len(list))
		for i, s := range list {
			e, err := s.event()
			if err != nil {
				return nil, bad("batch event %d: %v", i, err)
			}
			out = append(out, e.export())
		}
		return out, nil
	case mt == "application/cloudevents+json":
		e, err := parseStructured(body)
		if err != nil {
			return nil, err
		}
		return []Event{e.export()}, nil
	case h.Get("Ce-Specversion") != "":
		e, err := parseBinary(h, mt, body)
		if err != nil {
			return nil, err
		}
		return []Event{e.export()}, nil
	}
	return nil, nil
}

// Keys says which Services a request concerns in many-Services mode: the
// distinct keys of its CloudEvents, sorted, or all when one of them (or the
// request, not being a CloudEvent) names no Service.
func Keys(h http.Header, body []byte) (keys []string, all bool, err error) {
	events, err := Events(h, body)
	if err != nil {
		return nil, false, err
	}
	if len(events) == 0 {
		return nil, true, nil
	}
	for _, ce := range events {
		key, ok := EventKey(ce)
		if !ok {
			return nil, true, nil
		}
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, false, nil
}
