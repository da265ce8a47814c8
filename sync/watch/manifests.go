package watch

import (
	"context"
	"log/slog"
	"time"
)

// Manifests pokes when the manifests that `serve --manifests` reads
// instead of the Kubernetes API change: no watch tells it. It pokes once
// at start, for the first reconcile, then reads Version every Every and
// pokes when the version differs from the last one read (see nextVersion).
//
// Polling a digest of the files needs no dependency and sees every way a
// file is replaced (an editor's rename, a ConfigMap's symlink swap, a copy
// that keeps an older modification time), where a notification on the
// path or a comparison of modification times misses some. The files are
// small (a Service, its EndpointSlices, Nodes): reading them every few
// seconds costs little.
type Manifests struct {
	// Version reads the manifests' version (kube.ManifestsVersion).
	Version func() (string, error)
	// Every is the polling period; zero takes 2s.
	Every time.Duration
	// Poke asks for a reconcile: source "start" at start, "manifests"
	// for a change.
	Poke func(source, reason string)
	Log  *slog.Logger
	// After is the clock; nil takes time.After.
	After func(time.Duration) <-chan time.Time
}

// Run pokes at start and on each change until ctx is done. The version is
// read before the first poke, so that an edit made while the first
// reconcile reads is seen by the next poll.
func (m *Manifests) Run(ctx context.Context) {
	every, after := m.Every, m.After
	if every <= 0 {
		every = 2 * time.Second
	}
	if after == nil {
		after = time.After
	}
	log := m.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	last, err := m.Version()
	failing := err != nil
	if failing {
		log.Warn("manifests cannot be read; their changes are noticed once they can", "error", err)
	}
	m.Poke("start", "start")
	for {
		select {
		case <-ctx.Done():
			return
		case <-after(every):
		}
		read, err := m.Version()
		switch {
		case err != nil && !failing:
			log.Warn("manifests cannot be read; their changes are noticed once they can", "error", err)
		case err == nil && failing:
			log.Info("manifests can be read again")
		}
		failing = err != nil
		var changed bool
		if last, changed = nextVersion(last, read, err); changed {
			log.Info("manifests changed: reconciling")
			m.Poke("manifests", "manifests changed")
		}
	}
}

// nextVersion is the version the next read is compared with, and whether
// this read (read, err) is a change: a read that failed is none (a file
// being replaced may be missing for a moment; a reconcile would fail on it
// and change nothing), and the next read that succeeds is compared with
// the last one that did. The first version read after a failure at start
// ("" before) is a change.
func nextVersion(last, read string, err error) (next string, changed bool) {
	if err != nil || read == last {
		return last, false
	}
	return read, true
}
