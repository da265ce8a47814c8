package main

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// What the provenance says of how a release is built. A build on a laptop
// names localBuilder; the release workflow names its own run.
const (
	statementType  = "https://in-toto.io/Statement/v1"
	slsaProvenance = "https://slsa.dev/provenance/v1"
	buildType      = source + "/blob/main/docs/install.md#release-artefacts"
	releaseCommand = "make release"
	localBuilder   = "urn:haproxy-k8s-sync:builder:local-make-release"
)

// The parts of an in-toto Statement v1 with a SLSA provenance v1 predicate
// the release writes.
type statement struct {
	Type          string     `json:"_type"`
	Subject       []resource `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     predicate  `json:"predicate"`
}

// resource is an in-toto ResourceDescriptor.
type resource struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest,omitempty"`
}

type predicate struct {
	BuildDefinition buildDefinition `json:"buildDefinition"`
	RunDetails      runDetails      `json:"runDetails"`
}

type buildDefinition struct {
	BuildType            string         `json:"buildType"`
	ExternalParameters   externalParams `json:"externalParameters"`
	InternalParameters   internalParams `json:"internalParameters"`
	ResolvedDependencies []resource     `json:"resolvedDependencies"`
}

// externalParams are what the person or workflow who started the build
// chose: the command, the source at a commit, the release.
type externalParams struct {
	Command  string   `json:"command"`
	Source   resource `json:"source"`
	Version  string   `json:"version"`
	Platform string   `json:"platform"`
}

// internalParams are what the build set by itself: the timestamps of every
// file, and what Go recorded of the build in the binary (GOARCH,
// CGO_ENABLED, -trimpath, vcs.modified for a tree with changes).
type internalParams struct {
	SourceDateEpoch string            `json:"SOURCE_DATE_EPOCH"`
	GoVersion       string            `json:"goVersion"`
	GoBuild         map[string]string `json:"goBuildSettings"`
}

type runDetails struct {
	Builder  builder      `json:"builder"`
	Metadata *runMetadata `json:"metadata,omitempty"`
}

type builder struct {
	ID string `json:"id"`
}

// runMetadata carries no times: they would make two builds of one commit
// differ.
type runMetadata struct {
	InvocationID string `json:"invocationId"`
}

// provenance is the statement of one platform's image: its subjects are the
// image (by manifest digest, under the repository it is published to) and
// the binary in it (the release's file of that name), built by make release
// from the commit, on the Debian package and Go modules they contain.
func provenance(o options, bin binary, binName string, d deb, digest v1.Hash, epoch time.Time) statement {
	src := resource{URI: "git+" + source, Digest: map[string]string{"gitCommit": o.commit}}
	settings := map[string]string{}
	for _, s := range bin.info.Settings {
		settings[s.Key] = s.Value
	}
	deps := []resource{
		src,
		{Name: d.name, URI: "pkg:deb/debian/" + d.name + "@" + url.PathEscape(d.version) + "?arch=" + d.arch,
			Digest: map[string]string{"sha256": d.sha256}},
		{Name: "stdlib", URI: "pkg:golang/stdlib@" + bin.info.GoVersion},
	}
	for _, m := range bin.info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		r := resource{Name: m.Path, URI: "pkg:golang/" + m.Path + "@" + url.PathEscape(m.Version)}
		// in-toto's dirHash is Go's h1: module hash, in hex.
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(m.Sum, "h1:")); err == nil && strings.HasPrefix(m.Sum, "h1:") {
			r.Digest = map[string]string{"dirHash": hex.EncodeToString(raw)}
		}
		deps = append(deps, r)
	}
	st := statement{
		Type: statementType,
		Subject: []resource{
			{Name: o.repository, Digest: map[string]string{"sha256": digest.Hex}},
			{Name: binName, Digest: map[string]string{"sha256": sha256Hex(bin.data)}},
		},
		PredicateType: slsaProvenance,
		Predicate: predicate{
			BuildDefinition: buildDefinition{
				BuildType: buildType,
				ExternalParameters: externalParams{
					Command: releaseCommand, Source: src, Version: o.version, Platform: platform(bin.arch).String(),
				},
				InternalParameters: internalParams{
					SourceDateEpoch: strconv.FormatInt(epoch.Unix(), 10),
					GoVersion:       bin.info.GoVersion,
					GoBuild:         settings,
				},
				ResolvedDependencies: deps,
			},
			RunDetails: runDetails{Builder: builder{ID: o.builderID}},
		},
	}
	if o.invocationID != "" {
		st.Predicate.RunDetails.Metadata = &runMetadata{InvocationID: o.invocationID}
	}
	return st
}
