package events

import (
	"context"
	"log/slog"
	"sync"
)

// Hub holds the Recorders of many Services (many-Services mode): each
// Service's Events are bounded by its own Recorder, as in the single-Service
// mode, and one queue and one writer (Run) serve them all.
type Hub struct {
	sink  Sink
	host  string
	log   *slog.Logger
	queue chan event
	// OnWrite, when set before the first For, is each Recorder's OnWrite.
	OnWrite func(op string)

	mu   sync.Mutex
	recs map[string]*Recorder
}

// Bounds of a Hub: its queue, shared by every Service, and how many
// Recorders it remembers (a forgotten one only costs a few more writes).
const (
	hubQueueLen  = 256
	maxRecorders = 4096
)

// NewHub returns a Hub writing to sink, reported by host (the pod's name).
func NewHub(sink Sink, host string, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{sink: sink, host: host, log: log, queue: make(chan event, hubQueueLen), recs: map[string]*Recorder{}}
}

// For returns the Recorder of Service namespace/service, the same one on
// every call while it is remembered.
func (h *Hub) For(namespace, service string) *Recorder {
	key := namespace + "/" + service
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.recs[key]; ok {
		return r
	}
	if len(h.recs) >= maxRecorders {
		for k := range h.recs { // any one: its memory only saves writes
			delete(h.recs, k)
			break
		}
	}
	r := New(h.sink, namespace, service, h.host, h.log)
	r.queue = h.queue
	r.OnWrite = h.OnWrite
	h.recs[key] = r
	return r
}

// Run writes every Recorder's queued Events until ctx ends.
func (h *Hub) Run(ctx context.Context) { drain(ctx, h.queue) }
