package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

// releaseVersion is the VERSION file: the one place the release is set.
func releaseVersion(t *testing.T) string {
	t.Helper()
	v := strings.TrimSpace(readDoc(t, "VERSION"))
	if !semver.MatchString(v) {
		t.Fatalf("VERSION holds %q, want X.Y.Z", v)
	}
	return v
}

// changelogVersion returns the newest released version CHANGELOG.md lists
// (the first "## [X.Y.Z] - date" heading). An "Unreleased" section with
// entries fails the test: the docs describe a release, and what they
// describe is cut together (VERSION, CHANGELOG, chart, image tags).
func changelogVersion(t *testing.T) string {
	t.Helper()
	release := regexp.MustCompile(`^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?\s*$`)
	sc := bufio.NewScanner(strings.NewReader(readDoc(t, "CHANGELOG.md")))
	unreleased := false
	for sc.Scan() {
		line := sc.Text()
		if m := release.FindStringSubmatch(line); m != nil {
			if strings.EqualFold(m[1], "Unreleased") {
				unreleased = true
				continue
			}
			if !semver.MatchString(m[1]) || m[2] == "" {
				t.Fatalf("CHANGELOG.md: %q is not `## [X.Y.Z] - YYYY-MM-DD`", line)
			}
			return m[1]
		}
		if unreleased && strings.HasPrefix(line, "- ") {
			t.Errorf("CHANGELOG.md has Unreleased entries (%q): the docs would describe what no image has; put them under the release the docs describe and cut it (VERSION, CHANGELOG, chart, image tags)", line)
			unreleased = false
		}
	}
	t.Fatal("CHANGELOG.md lists no release")
	return ""
}

// readYAML decodes a file of deploy/ (a path from this directory).
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// imageRef is an image reference with a release tag, or a kustomize newTag.
var imageRef = regexp.MustCompile(`[A-Za-z0-9./-]*haproxy-k8s-sync:(\d+\.\d+\.\d+[A-Za-z0-9._-]*)|newTag: "?([A-Za-z0-9._-]+)"?`)

// textUnits splits a page into what a reader takes as one statement: its
// paragraphs (or comment blocks), each with the code block that follows it,
// and each row of a table alone.
func textUnits(text string) []string {
	var out []string
	for _, para := range strings.Split(text, "\n\n") {
		if strings.HasPrefix(para, "```") && len(out) > 0 {
			out[len(out)-1] += "\n\n" + para
			continue
		}
		var rest []string
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "|") {
				out = append(out, line)
			} else {
				rest = append(rest, line)
			}
		}
		out = append(out, strings.Join(rest, "\n"))
	}
	return out
}

// TestReleaseVersionsAgree: VERSION is the release; the binary make builds,
// the Dockerfile's, CHANGELOG.md's newest release, the chart's version and
// appVersion, the image tags of deploy/ and knative/, the release README.md
// and docs/install.md say they describe, and every image named in the
// manifests and docs are that one. Cutting a release is editing VERSION,
// CHANGELOG.md and the places this test names when they disagree. A page or
// manifest that names the ghcr.io image says, in the same paragraph, that the
// release workflow publishes it: it exists only for releases tagged since.
func TestReleaseVersionsAgree(t *testing.T) {
	v := releaseVersion(t)
	if got := changelogVersion(t); got != v {
		t.Errorf("CHANGELOG.md: newest release %s; VERSION says %s", got, v)
	}
	if !strings.Contains(readDoc(t, "CHANGELOG.md"), "\n["+v+"]: ") {
		t.Errorf("CHANGELOG.md has no link for [%s]", v)
	}
	out, err := exec.Command("make", "-C", "..", "-n", "build").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-X main.version="+v+" ") {
		t.Errorf("make build does not stamp main.version=%s (VERSION): %v\n%s", v, err, out)
	}
	if !strings.Contains(readDoc(t, "Dockerfile"), "-X main.version=$(cat VERSION)") {
		t.Error("the Dockerfile does not stamp the version from VERSION")
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, "helm/haproxy-k8s-sync/Chart.yaml", &chart)
	if chart.Version != v || chart.AppVersion != v {
		t.Errorf("deploy/helm/haproxy-k8s-sync/Chart.yaml: version %q, appVersion %q; VERSION says %s", chart.Version, chart.AppVersion, v)
	}
	var values struct {
		Image struct {
			Tag string `json:"tag"`
		} `json:"image"`
	}
	readYAML(t, "helm/haproxy-k8s-sync/values.yaml", &values)
	if values.Image.Tag != "" && values.Image.Tag != v {
		t.Errorf("deploy/helm/haproxy-k8s-sync/values.yaml: image.tag %q; VERSION says %s", values.Image.Tag, v)
	}
	for _, k := range []string{"base/kustomization.yaml", "../knative/base/kustomization.yaml"} {
		var kz struct {
			Images []struct {
				Name   string `json:"name"`
				NewTag string `json:"newTag"`
			} `json:"images"`
		}
		readYAML(t, k, &kz)
		found := false
		for _, im := range kz.Images {
			if im.Name == "haproxy-k8s-sync" {
				found = true
				if im.NewTag != v {
					t.Errorf("%s: image newTag %q; VERSION says %s", k, im.NewTag, v)
				}
			}
		}
		if !found {
			t.Errorf("%s sets no image tag for haproxy-k8s-sync", k)
		}
	}
	readme := readDoc(t, "README.md")
	if !strings.Contains(readme, "release "+v) && !strings.Contains(readme, "**release "+v+"**") {
		t.Errorf("README.md does not say it describes release %s (VERSION)", v)
	}
	if !strings.Contains(readDoc(t, "docs/install.md"), "release "+v) {
		t.Errorf("docs/install.md does not say it describes release %s (VERSION)", v)
	}
	// Every image reference elsewhere: manifests, chart, docs.
	refs := 0
	for _, dir := range []string{"../deploy", "../knative", "../docs", "../README.md"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch filepath.Ext(path) {
			case ".md", ".yaml", ".yml", ".tpl", ".txt", ".json":
			default:
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, unit := range textUnits(string(data)) {
				if strings.Contains(unit, "ghcr.io/haproxy-k8s-sync") && !strings.Contains(strings.Join(strings.Fields(unit), " "), "release workflow") {
					t.Errorf("%s names ghcr.io/haproxy-k8s-sync without saying, there, that the release workflow publishes it (when a release is tagged, not before): %.200q", path, unit)
				}
			}
			for _, m := range imageRef.FindAllStringSubmatch(string(data), -1) {
				refs++
				if tag := m[1] + m[2]; tag != v {
					t.Errorf("%s names image tag %s (%s); VERSION says %s", path, tag, m[0], v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if refs < 4 {
		t.Errorf("only %d image references found", refs)
	}
}
