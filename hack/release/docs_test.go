package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The identity keyless signing gives the release workflow on a tag, and
// identities that must not pass for it.
const workflowIdentity = "https://github.com/haproxy-k8s-sync/haproxy-k8s-sync/.github/workflows/release.yml@refs/tags/v"

var notTheRelease = []string{
	"https://github.com/haproxy-k8s-sync/haproxy-k8s-sync/.github/workflows/test.yml@refs/heads/main",
	"https://github.com/haproxy-k8s-sync/haproxy-k8s-sync/.github/workflows/release.yml@refs/heads/main",
	"https://github.com/haproxy-k8s-sync/haproxy-k8s-sync/.github/workflows/release.yml@refs/pull/1/merge",
	"https://github.com/someone/haproxy-k8s-sync/.github/workflows/release.yml@refs/tags/v1.0.0",
	"https://github.com/haproxy-k8s-sync/haproxy-k8s-sync-fork/.github/workflows/release.yml@refs/tags/v1.0.0",
	"https://github.com/haproxy-k8s-sync/haproxy-k8s-syncXgithub/workflows/release.yml@refs/tags/v1.0.0",
}

var (
	identityFlag = regexp.MustCompile(`--certificate-identity-regexp '([^']+)'`)
	issuerFlag   = regexp.MustCompile(`--certificate-oidc-issuer (\S+)`)
	releaseFile  = regexp.MustCompile("haproxy-k8s-sync[-_][0-9][A-Za-z0-9_.<>-]*")
)

// TestInstallDocsVerifyTheRelease: docs/install.md's verification commands
// check what the release workflow signs: the identity they accept is the
// workflow's on a tag of this repository and nothing else, the issuer is
// GitHub's, the bundle and attestation types are the ones it writes; every
// release file the page names is one make release writes; and its
// sha256sum line passes on part of a release and fails on a changed file.
func TestInstallDocsVerifyTheRelease(t *testing.T) {
	page, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	v := version(t)
	ids := identityFlag.FindAllStringSubmatch(doc, -1)
	issuers := issuerFlag.FindAllStringSubmatch(doc, -1)
	if len(ids) < 4 || len(issuers) != len(ids) {
		t.Fatalf("docs/install.md: %d identities and %d issuers, want one of each for SHA256SUMS, the image, the chart, the attestations", len(ids), len(issuers))
	}
	for i, m := range ids {
		re, err := regexp.Compile(m[1])
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		if !re.MatchString(workflowIdentity + v) {
			t.Errorf("%s does not accept the release workflow on tag v%s (%s)", m[1], v, workflowIdentity+v)
		}
		for _, other := range notTheRelease {
			if re.MatchString(other) {
				t.Errorf("%s accepts %s", m[1], other)
			}
		}
		if issuers[i][1] != "https://token.actions.githubusercontent.com" {
			t.Errorf("issuer %s, want GitHub Actions'", issuers[i][1])
		}
	}

	wf, err := os.ReadFile("../../.github/workflows/release.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tags: ["v*"]`, "id-token: write", "--bundle bin/release/SHA256SUMS.sigstore.json",
		"--type slsaprovenance1", "--type spdxjson", "cosign sign --yes --recursive", "gh release upload"} {
		if !strings.Contains(string(wf), want) {
			t.Errorf(".github/workflows/release.yml lacks %q, which docs/install.md relies on", want)
		}
	}
	for _, want := range []string{"SHA256SUMS.sigstore.json", "--type slsaprovenance1", "--type spdxjson"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/install.md does not name %q", want)
		}
	}

	dir := built(t)
	named := 0
	for _, f := range releaseFile.FindAllString(doc, -1) {
		f = strings.TrimRight(f, ".")
		if !strings.Contains(f, "_"+v+"_") && !strings.Contains(f, "-"+v+".") {
			t.Errorf("docs/install.md names %s, not of release %s", f, v)
			continue
		}
		for _, arch := range []string{"amd64", "arm64"} {
			named++
			if _, err := os.Stat(filepath.Join(dir, strings.ReplaceAll(f, "<arch>", arch))); err != nil {
				t.Errorf("docs/install.md names %s: make release wrote no such file", f)
			}
		}
	}
	if named < 10 {
		t.Errorf("docs/install.md names only %d release files", named/2)
	}

	var check string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "sha256sum ") {
			check = line
		}
	}
	if !strings.Contains(check, "--ignore-missing") {
		t.Fatalf("docs/install.md: the sha256sum line %q does not skip files not downloaded", check)
	}
	part := t.TempDir()
	for _, f := range []string{"SHA256SUMS", "index.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(part, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func() error {
		cmd := exec.Command("bash", "-c", check)
		cmd.Dir = part
		return cmd.Run()
	}
	if err := run(); err != nil {
		t.Errorf("%s, with SHA256SUMS and index.yaml only: %v", check, err)
	}
	if err := os.WriteFile(filepath.Join(part, "index.yaml"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(); err == nil {
		t.Errorf("%s passes a changed index.yaml", check)
	}
}
