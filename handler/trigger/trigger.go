// Package trigger reads what poked the service: an empty body, plain JSON, a
// text or form body (curl -d), a raw Kubernetes watch event, or a CloudEvent
// 1.0 (binary, structured or batched mode, e.g. from a Knative
// ApiServerSource or PingSource). Errors quote at most MaxQuote bytes of
// any input.
//
// Every trigger means "reconcile everything"; the body only lets a request be
// skipped when it clearly concerns another object: an EndpointSlice of another
// namespace or Service, another Service, a Node in pod mode, a watch bookmark.
// Anything unclear is reconciled: a lost event costs more than a spare run.
package trigger

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
)

// Kind is the shape of the request.
type Kind string

// The shapes Parse recognises.
const (
	Empty      Kind = "empty"
	Text       Kind = "text" // text or form body: a poke, its content unused
	JSON       Kind = "json"
	Watch      Kind = "watch"
	CloudEvent Kind = "cloudevent"
	Batch      Kind = "cloudevent-batch"
)

// Trigger is what a request says, for the log and the ignore decision.
type Trigger struct {
	Kind Kind
	// ID, Type and Source are the CloudEvent's (the first one of a batch), or
	// the watch event type.
	ID, Type, Source string
	// Events is the number of events carried (0 for a plain poke).
	Events int
	// Ignore, when not empty, says why the request can be skipped.
	Ignore string
}

// Target is what this service follows.
type Target struct {
	Namespace string
	Service   string
	NodeMode  bool
	// ManagedBy is ENDPOINTSLICE_MANAGED_BY: which controller's slices
	// count; empty, any controller's.
	ManagedBy string
}

// Error is a request that cannot be read; Status is 400 or 415.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func bad(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// MaxQuote is the most of any input an error message or reason quotes.
const MaxQuote = 200

// Short cuts s to MaxQuote bytes (marking the cut), for messages that quote
// input.
func Short(s string) string { return cut.To(s, MaxQuote) }

// NewID returns a random trigger id, for a request that brings none and for
// the service's own pokes.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Parse reads a request's headers and its (size-limited) body.
func Parse(h http.Header, body []byte, t Target) (Trigger, error) {
	ct := h.Get("Content-Type")
	mt := ""
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return Trigger{}, &Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("bad content type %q", Short(ct))}
		}
	}
	switch {
	case mt == "application/cloudevents-batch+json":
		return parseBatch(body, t)
	case mt == "application/cloudevents+json":
		ev, err := parseStructured(body)
		if err != nil {
			return Trigger{}, err
		}
		return ev.trigger(t, 1), nil
	case h.Get("Ce-Specversion") != "":
		ev, err := parseBinary(h, mt, body)
		if err != nil {
			return Trigger{}, err
		}
		return ev.trigger(t, 1), nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return Trigger{Kind: Empty}, nil
	}
	switch mt {
	case "", "application/json":
		return parsePlainJSON(body, t)
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		// A poke written as curl -d '{}' or curl -F: its content is not read.
		return Trigger{Kind: Text}, nil
	default:
		return Trigger{}, &Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("unsupported content type %q", Short(mt))}
	}
}

// event is one CloudEvent, reduced to what matters here.
type event struct {
	id, typ, source, subject string
	ext                      map[string]string // kind, name, namespace
	data                     json.RawMessage   // nil when absent or not JSON
}

func (e event) validate() error {
	switch {
	case e.id == "":
		return bad("cloudevent without id")
	case e.typ == "":
		return bad("cloudevent without type")
	case e.source == "":
		return bad("cloudevent without source")
	}
	return nil
}

func parseBinary(h http.Header, mt string, body []byte) (event, error) {
	if v := h.Get("Ce-Specversion"); v != "1.0" {
		return event{}, bad("unsupported cloudevents specversion %q", Short(v))
	}
	e := event{id: h.Get("Ce-Id"), typ: h.Get("Ce-Type"), source: h.Get("Ce-Source"), subject: h.Get("Ce-Subject"),
		ext: map[string]string{"kind": h.Get("Ce-Kind"), "name": h.Get("Ce-Name"), "namespace": h.Get("Ce-Namespace")}}
	if err := e.validate(); err != nil {
		return e, err
	}
	if len(bytes.TrimSpace(body)) > 0 && (mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		if !json.Valid(body) {
			return e, bad("cloudevent data is not valid JSON")
		}
		e.data = body
	}
	return e, nil
}

// structured is the JSON form of a CloudEvent.
type structured struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Type            string          `json:"type"`
	Source          string          `json:"source"`
	Subject         string          `json:"subject"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
	DataBase64      *string         `json:"data_base64"`
	Kind            string          `json:"kind"`
	Name            string          `json:"name"`
	Namespace       string          `json:"namespace"`
}

func parseStructured(body []byte) (event, error) {
	var s structured
	if err := json.Unmarshal(body, &s); err != nil {
		return event{}, bad("malformed cloudevent: %v", err)
	}
	return s.event()
}

func (s structured) event() (event, error) {
	if s.SpecVersion != "1.0" {
		return event{}, bad("unsupported cloudevents specversion %q", Short(s.SpecVersion))
	}
	e := event{id: s.ID, typ: s.Type, source: s.Source, subject: s.Subject,
		ext: map[string]string{"kind": s.Kind, "name": s.Name, "namespace": s.Namespace}}
	if err := e.validate(); err != nil {
		return e, err
	}
	jsonData := s.DataContentType == "" || s.DataContentType == "application/json" || strings.HasSuffix(s.DataContentType, "+json")
	switch {
	case s.DataBase64 != nil:
		raw, err := base64.StdEncoding.DecodeString(*s.DataBase64)
		if err != nil {
			return e, bad("cloudevent data_base64 is not base64: %v", err)
		}
		if jsonData && json.Valid(raw) {
			e.data = raw
		}
	case len(s.Data) > 0 && jsonData:
		e.data = s.Data
	}
	return e, nil
}

func parseBatch(body []byte, t Target) (Trigger, error) {
	var list []structured
	if err := json.Unmarshal(body, &list); err != nil {
		return Trigger{}, bad("malformed cloudevents batch: %v", err)
	}
	if len(list) == 0 {
		return Trigger{}, bad("empty cloudevents batch")
	}
	var first Trigger
	ignore := []string{}
	for i, s := range list {
		e, err := s.event()
		if err != nil {
			return Trigger{}, bad("batch event %d: %v", i, err)
		}
		tr := e.trigger(t, len(list))
		if i == 0 {
			first = tr
		}
		if tr.Ignore == "" {
			ignore = nil // one relevant event is enough to reconcile
		} else if ignore != nil {
			ignore = append(ignore, tr.Ignore)
		}
	}
	first.Kind, first.Ignore = Batch, Short(strings.Join(ignore, "; "))
	return first, nil
}

func (e event) trigger(t Target, n int) Trigger {
	tr := Trigger{Kind: CloudEvent, ID: Short(e.id), Type: Short(e.typ), Source: Short(e.source), Events: n}
	if !strings.HasPrefix(e.typ, "dev.knative.apiserver.") {
		return tr // PingSource and anything else: reconcile
	}
	ref := objectRef{kind: e.ext["kind"], namespace: e.ext["namespace"], name: e.ext["name"]}
	ref.fromSubject(e.subject)
	if e.data != nil {
		var obj k8sObject
		if json.Unmarshal(e.data, &obj) == nil {
			ref.merge(obj.ref())
		}
	}
	tr.Ignore = Short(ref.ignore(t))
	return tr
}

// k8sObject reads both a Reference-mode payload ({kind, namespace, name}) and
// a full object (Resource mode, or a watch event's object).
type k8sObject struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Metadata  *struct {
		Namespace string             `json:"namespace"`
		Name      string             `json:"name"`
		Labels    *map[string]string `json:"labels"`
	} `json:"metadata"`
}

func (o k8sObject) ref() objectRef {
	r := objectRef{kind: o.Kind, namespace: o.Namespace, name: o.Name}
	if m := o.Metadata; m != nil {
		r.namespace, r.name = m.Namespace, m.Name
		r.full = true
		if m.Labels != nil {
			r.labels = *m.Labels
		}
	}
	return r
}

type objectRef struct {
	kind, namespace, name string
	full                  bool // a whole object: its labels are known
	labels                map[string]string
}

func (r *objectRef) merge(o objectRef) {
	if o.kind != "" {
		r.kind = o.kind
	}
	if o.namespace != "" {
		r.namespace = o.namespace
	}
	if o.name != "" {
		r.name = o.name
	}
	r.full, r.labels = o.full, o.labels
}

// fromSubject reads /apis/<group>/<version>/namespaces/<ns>/<resource>/<name>.
func (r *objectRef) fromSubject(subject string) {
	parts := strings.Split(strings.Trim(subject, "/"), "/")
	for i := 0; i+3 < len(parts); i++ {
		if parts[i] == "namespaces" && i+3 == len(parts)-1 {
			if r.namespace == "" {
				r.namespace = parts[i+1]
			}
			if r.name == "" {
				r.name = parts[i+3]
			}
			if r.kind == "" && parts[i+2] == "endpointslices" {
				r.kind = "EndpointSlice"
			}
		}
	}
}

// maxGeneratedPrefix is how much of generateName the API server keeps (63
// characters minus the 5 random ones); EndpointSlice names are the Service
// name, "-", and 5 random characters.
const maxGeneratedPrefix = 58

func (r objectRef) ignore(t Target) string {
	otherNS := r.namespace != "" && r.namespace != t.Namespace
	switch r.kind {
	case "EndpointSlice":
		switch {
		case otherNS:
			return fmt.Sprintf("endpointslice %s/%s is in another namespace", r.namespace, r.name)
		case r.full && r.labels["kubernetes.io/service-name"] != t.Service:
			return fmt.Sprintf("endpointslice %s/%s belongs to service %q", r.namespace, r.name, r.labels["kubernetes.io/service-name"])
		case !r.full && r.name != "" && namesSlices(t.ManagedBy) && !strings.HasPrefix(r.name, slicePrefix(t.Service)):
			// Without labels (Reference mode) a name tells only when
			// the slices that count come from a controller that names
			// them after their Service: any other event is a poke.
			return fmt.Sprintf("endpointslice %s/%s is not named after service %s", r.namespace, r.name, t.Service)
		}
	case "Service":
		if otherNS || (r.name != "" && r.name != t.Service) {
			return fmt.Sprintf("service %s/%s is another service", r.namespace, r.name)
		}
	case "Node":
		if !t.NodeMode {
			return "nodes do not matter in pod mode"
		}
	}
	return ""
}

// namesSlices reports whether managedBy is one of Kubernetes' EndpointSlice
// controllers, which name every slice "<service>-" and 5 random characters.
func namesSlices(managedBy string) bool {
	return managedBy == "endpointslice-controller.k8s.io" || managedBy == "endpointslicemirroring-controller.k8s.io"
}

func slicePrefix(service string) string {
	p := service + "-"
	if len(p) > maxGeneratedPrefix {
		p = p[:maxGeneratedPrefix]
	}
	return p
}

var watchTypes = map[string]bool{"ADDED": true, "MODIFIED": true, "DELETED": true, "BOOKMARK": true, "ERROR": true}

// parsePlainJSON reads a JSON object: a raw watch event ({"type","object"}) or
// any other object, such as {}, as a plain poke.
func parsePlainJSON(body []byte, t Target) (Trigger, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return Trigger{}, bad("body is not a JSON object: %v", err)
	}
	rawType, hasType := m["type"]
	rawObj, hasObj := m["object"]
	if !hasType || !hasObj {
		return Trigger{Kind: JSON}, nil
	}
	var typ string
	if err := json.Unmarshal(rawType, &typ); err != nil || !watchTypes[typ] {
		return Trigger{}, bad("watch event type %s is not ADDED, MODIFIED, DELETED, BOOKMARK or ERROR", Short(string(rawType)))
	}
	tr := Trigger{Kind: Watch, Type: typ, Events: 1}
	switch typ {
	case "BOOKMARK":
		tr.Ignore = "watch bookmark: nothing changed"
	case "ERROR":
		// The watch broke and events may be lost: reconcile.
	default:
		var obj k8sObject
		if err := json.Unmarshal(rawObj, &obj); err != nil {
			return Trigger{}, bad("watch event object: %v", err)
		}
		tr.Ignore = Short(obj.ref().ignore(t))
	}
	return tr, nil
}
