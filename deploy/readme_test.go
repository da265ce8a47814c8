package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// docPages are the pages whose commands and cited tests are checked:
// README.md and every page of docs/, as paths from the repository root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no page in docs/")
	}
	sort.Strings(pages)
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, strings.TrimPrefix(p, "../"))
	}
	return out
}

// readDoc reads a page given as a path from the repository root.
func readDoc(t *testing.T, page string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", page))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// shCommands returns the commands of a page's sh blocks, with continuation
// lines joined.
func shCommands(text string) []string {
	var cmds []string
	in, cur := false, ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```sh"):
			in = true
		case in && strings.HasPrefix(line, "```"):
			in = false
		case in:
			if strings.HasSuffix(line, "\\") {
				cur += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			if c := strings.TrimSpace(cur + line); c != "" {
				cmds = append(cmds, c)
			}
			cur = ""
		}
	}
	return cmds
}

// withoutComment drops a trailing shell comment (" # ...") from a command.
func withoutComment(c string) string {
	if i := strings.Index(c, " # "); i >= 0 {
		c = c[:i]
	}
	return strings.TrimSpace(c)
}

// overlayCopy is a copy of an example overlay beside it, which the
// overlay's relative paths need.
var overlayCopy = regexp.MustCompile(`^(deploy|knative)/overlays/example (deploy|knative)/overlays/[a-z0-9-]+$`)

var exportedName = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)=`)

// haproxyURL matches an exported HAProxy URL variable and its value.
var haproxyURL = regexp.MustCompile(`\b(HAPROXY_DATAPLANE_URL|HAPROXY_RUNTIME_URL)=(\S+)`)

// TestDocsCommandsWork runs every command README.md and docs/*.md show, as
// pasted into bash, where this test can: cluster commands as server-side dry
// runs against the test API server, helm install as helm template, make
// targets with -n. Commands that need a running service (serve, curl) are
// checked for what they name: the variables exist and the subcommand is
// there. A command sent to the background must be followed by a wait for
// /readyz, and an exported HAProxy URL must refuse to expand until the reader
// sets it (a pasted placeholder is retried until the deadline, saying
// nothing). A new kind of command fails the test until it is given a rule
// here.
func TestDocsCommandsWork(t *testing.T) {
	namespace(t, "ingress-nginx")
	root, _ := filepath.Abs("..")
	known := map[string]bool{"KUBECONFIG": true}
	ct := reflect.TypeOf(config.Config{})
	for i := range ct.NumField() {
		known[ct.Field(i).Tag.Get("envconfig")] = true
	}
	run := func(t *testing.T, script string) {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = root
		// IMAGE: the reader's pushed image, which the chart's helm install
		// commands refuse to go without (TestChartRefusesThePlaceholderImage).
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+api.kubeconfig,
			"IMAGE=registry.test/haproxy-k8s-sync")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", script, err, out)
		}
	}
	var help string // the binary's help, read once
	subcommand := func(t *testing.T, sub string) {
		t.Helper()
		if help == "" {
			cmd := exec.Command("go", "run", "./cmd/haproxy-k8s-sync", "help")
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("haproxy-k8s-sync help: %v", err)
			}
			help = string(out)
		}
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(sub) + `\b`).MatchString(help) {
			t.Errorf("haproxy-k8s-sync has no command %q", sub)
		}
	}
	var copies []string // overlays copied by the pages' commands
	t.Cleanup(func() {
		for _, c := range copies {
			_ = os.RemoveAll(c)
		}
	})
	total := 0
	for _, page := range docPages(t) {
		cmds := shCommands(readDoc(t, page))
		total += len(cmds)
		for i, c := range cmds {
			f := strings.Fields(withoutComment(c))
			name := page + "/" + strings.Join(f[:min(2, len(f))], " ")
			t.Run(name, func(t *testing.T) {
				if len(f) < 2 {
					t.Fatalf("no rule to check this command of %s: %s", page, c)
				}
				switch {
				case f[0] == "make":
					run(t, "make -n "+f[1]+" >/dev/null")
				case f[0] == "export":
					for _, m := range exportedName.FindAllStringSubmatch(c, -1) {
						if !known[m[1]] {
							t.Errorf("%s exports %s, which the service does not read", page, m[1])
						}
					}
					for _, m := range haproxyURL.FindAllStringSubmatch(c, -1) {
						if !strings.HasPrefix(strings.Trim(m[2], `"`), "${"+m[1]+":?") {
							t.Errorf("%s exports %s=%s: a pasted placeholder is retried silently; write \"${%s:?set it to ...}\"", page, m[1], m[2], m[1])
						}
					}
					if strings.Contains(c, ":?") {
						// Pasted with the variables unset, the line must refuse.
						cmd := exec.Command("bash", "-c", withoutComment(c))
						cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
						if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "set it") {
							t.Errorf("%s: %q runs with its variables unset (%v): %s", page, c, err, out)
						}
					}
				case f[0] == "go" && f[1] == "run":
					if strings.HasSuffix(withoutComment(c), "&") {
						t.Errorf("%s starts `go run` in the background: what follows runs while it compiles; build first", page)
					}
					if len(f) < 4 {
						t.Fatalf("%s: %q names no subcommand", page, c)
					}
					subcommand(t, f[3])
				case f[0] == "bin/haproxy-k8s-sync":
					subcommand(t, f[1])
				case f[0] == "until":
					if !strings.Contains(c, "curl") || !strings.Contains(c, "/readyz") {
						t.Errorf("%s waits on something else than /readyz: %s", page, c)
					}
				case f[0] == "curl":
					if !strings.Contains(c, "Authorization: Bearer $WEBHOOK_TOKEN") || !strings.Contains(c, "/reconcile") {
						t.Errorf("the curl example does not POST /reconcile with the token: %s", c)
					}
				case f[0] == "cp":
					// Copying an example overlay beside it, as a reader does
					// before editing; the copy is removed at the end.
					w := strings.Fields(withoutComment(c))
					if len(w) != 4 || w[1] != "-r" || !overlayCopy.MatchString(w[2]+" "+w[3]) ||
						filepath.Dir(w[2]) != filepath.Dir(w[3]) || filepath.Base(w[3]) == "example" {
						t.Fatalf("%s: %q: only `cp -r <dir>/overlays/example <dir>/overlays/NAME` is checked", page, c)
					}
					dst := filepath.Join(root, w[3])
					if err := os.RemoveAll(dst); err != nil {
						t.Fatal(err)
					}
					copies = append(copies, dst)
					run(t, withoutComment(c))
				case f[0] == "kubectl" && f[1] == "apply" && strings.Contains(c, "overlays/example"):
					t.Errorf("%s applies the example overlay itself: apply the reader's copy of it", page)
				case f[0] == "kubectl" && (f[1] == "create" || f[1] == "apply"):
					run(t, c+" --dry-run=server -o name >/dev/null")
				case f[0] == "helm" && f[1] == "install":
					run(t, "helm template"+strings.TrimPrefix(c, "helm install")+" >/dev/null")
				default:
					t.Errorf("no rule to check this command of %s: %s", page, c)
				}
				if strings.HasSuffix(withoutComment(c), "&") {
					if i+1 >= len(cmds) || !strings.Contains(cmds[i+1], "/readyz") {
						t.Errorf("%s: %q runs in the background and the next command does not wait for /readyz", page, c)
					}
				}
			})
		}
	}
	if total < 5 {
		t.Fatalf("only %d commands found in README.md and docs/", total)
	}
}

var citedTest = regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)(?:/[^`\\s]*)?(?: [^`]*)?`")

// TestDocsCiteRealTests: every test, benchmark or fuzz target README.md and
// docs/*.md cite as evidence exists, so a claim cannot outlive the test
// behind it.
func TestDocsCiteRealTests(t *testing.T) {
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllSubmatch(src, -1) {
				defined[string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, page := range docPages(t) {
		cited := citedTest.FindAllStringSubmatch(readDoc(t, page), -1)
		total += len(cited)
		for _, m := range cited {
			if !defined[m[1]] {
				t.Errorf("%s cites %s, which no test file defines", page, m[1])
			}
		}
	}
	if total < 10 {
		t.Fatalf("only %d tests cited in README.md and docs/", total)
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
)

// prose returns a page's lines outside fenced code blocks, numbered from 1.
func prose(text string) map[int]string {
	out := map[int]string{}
	in := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			out[i+1] = line
		}
	}
	return out
}

// anchors returns the anchors GitHub gives a page's headings: lower case,
// punctuation but hyphens and underscores dropped, spaces as hyphens, a
// repeated one suffixed -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := prose(text)
	nums := make([]int, 0, len(lines))
	for n := range lines {
		nums = append(nums, n)
	}
	sort.Ints(nums) // in page order, for the -1, -2 suffixes
	for _, n := range nums {
		m := heading.FindStringSubmatch(lines[n])
		if m == nil {
			continue
		}
		h := strings.TrimSpace(m[1])
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocsLinksResolve: every relative link of README.md, docs/*.md, the
// chart's README and the CHANGELOG names a file of the repository and, for
// a Markdown page, a heading of it.
func TestDocsLinksResolve(t *testing.T) {
	pages := append(docPages(t), "deploy/helm/haproxy-k8s-sync/README.md", "CHANGELOG.md", "CONTRIBUTING.md")
	checked := 0
	for _, page := range pages {
		lines := prose(readDoc(t, page))
		nums := make([]int, 0, len(lines))
		for n := range lines {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		for _, n := range nums {
			for _, m := range mdLink.FindAllStringSubmatch(lines[n], -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(link, "#")
				target := page
				if file != "" {
					target = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(filepath.Join("..", target)); err != nil {
					t.Errorf("%s:%d: link %s: no file %s", page, n, link, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(target, ".md") && !anchors(readDoc(t, target))[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", page, n, link, target, anchor)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links found", checked)
	}
}

// TestReadmeIsAFrontDoor: README.md stays short, starts with its two set-up
// commands and links every page of docs/ (the release it describes:
// TestReleaseVersionsAgree).
func TestReadmeIsAFrontDoor(t *testing.T) {
	readme := readDoc(t, "README.md")
	lines := strings.Split(strings.TrimRight(readme, "\n"), "\n")
	if len(lines) > 300 {
		t.Errorf("README.md has %d lines; it is the front door (300 at most): move the rest to docs/", len(lines))
	}
	first := strings.Join(lines[:min(40, len(lines))], "\n")
	cmds := shCommands(first)
	if len(cmds) < 2 || !strings.HasPrefix(cmds[0], "make demo") || !strings.HasPrefix(cmds[1], "make test") {
		t.Errorf("README.md's first 40 lines must start with a sh block of `make demo` and `make test`; found %q", cmds)
	}
	for _, page := range docPages(t)[1:] {
		if !strings.Contains(readme, "]("+page+")") {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

// TestDocsFiguresAgree: a figure quoted in several places has one value.
// The watch latency quoted in the docs is BenchmarkWatchNoPost's, and the
// memory sizing of docs/benchmarks.md (peak at 10,000 pod endpoints, room
// under the 128Mi limit) covers the scale run's measure and is the one the
// chart's values and deploy/base repeat.
func TestDocsFiguresAgree(t *testing.T) {
	bench := readDoc(t, "docs/benchmarks.md")
	latency := regexp.MustCompile(`p50 (\d+) ms, p90 (\d+) ms`)
	var want []string
	for _, line := range strings.Split(bench, "\n") {
		if strings.Contains(line, "`BenchmarkWatchNoPost`") {
			want = latency.FindStringSubmatch(line)
		}
	}
	if want == nil {
		t.Fatal("docs/benchmarks.md: no p50/p90 for BenchmarkWatchNoPost")
	}
	for _, page := range docPages(t) {
		for _, m := range latency.FindAllStringSubmatch(readDoc(t, page), -1) {
			if m[0] != want[0] {
				t.Errorf("%s quotes %q; BenchmarkWatchNoPost measured %q", page, m[0], want[0])
			}
		}
	}

	sizing := regexp.MustCompile(`10,000 pod endpoints \((\d+)–(\d+) MB[^)]*\)\s+with (\d\.\d)× room`).FindStringSubmatch(bench)
	limit := regexp.MustCompile(`limit at (\d+) Mi`).FindStringSubmatch(bench)
	if sizing == nil || limit == nil {
		t.Fatal("docs/benchmarks.md: Sizing does not say the peak at 10,000 pod endpoints, its room and the limit")
	}
	var lo, hi, lim int
	var room float64
	fmt.Sscan(sizing[1], &lo)
	fmt.Sscan(sizing[2], &hi)
	fmt.Sscan(sizing[3], &room)
	fmt.Sscan(limit[1], &lim)
	if got := float64(lim*10/hi) / 10; got != room {
		t.Errorf("docs/benchmarks.md: %d Mi over %d MB is %.1f× room, not %.1f×", lim, hi, got, room)
	}
	// The scale run's peak at 10,000 endpoints: the last cell of its row.
	for _, line := range strings.Split(bench, "\n") {
		if strings.HasPrefix(line, "| peak resident memory") {
			cells := strings.Split(strings.Trim(line, "| "), "|")
			var peak int
			fmt.Sscanf(strings.TrimSpace(cells[len(cells)-1]), "%d MB", &peak)
			if peak < lo || peak > hi {
				t.Errorf("docs/benchmarks.md: the scale run peaked at %d MB at 10,000 endpoints, outside Sizing's %d–%d MB", peak, lo, hi)
			}
		}
	}
	for _, f := range []string{"helm/haproxy-k8s-sync/values.yaml", "base/deployment.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{fmt.Sprintf("%d-%d MB", lo, hi), fmt.Sprintf("%.1fx room", room)} {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s does not say %q as docs/benchmarks.md's Sizing does", f, w)
			}
		}
	}
}
