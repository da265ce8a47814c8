package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// readmeCommands returns the commands of README.md's sh blocks, with
// continuation lines joined.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, cur := false, ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
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

var exportedName = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)=`)

// TestReadmeCommandsWork runs every command README.md shows, as pasted into
// bash, where this test can: cluster commands as server-side dry runs against
// the test API server, helm install as helm template, make targets with -n.
// Commands that need a running service (serve, curl) are checked for what
// they name: the variables exist and the subcommand is there. A new kind of
// command fails the test until it is given a rule here.
func TestReadmeCommandsWork(t *testing.T) {
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
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+api.kubeconfig)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", script, err, out)
		}
	}
	cmds := readmeCommands(t)
	if len(cmds) < 5 {
		t.Fatalf("only %d commands found in README.md", len(cmds))
	}
	for _, c := range cmds {
		t.Run(strings.Fields(c)[0]+" "+strings.Fields(c)[1], func(t *testing.T) {
			f := strings.Fields(c)
			switch {
			case f[0] == "make":
				run(t, "make -n "+f[1]+" >/dev/null")
			case f[0] == "export":
				for _, m := range exportedName.FindAllStringSubmatch(c, -1) {
					if !known[m[1]] {
						t.Errorf("README exports %s, which the service does not read", m[1])
					}
				}
			case f[0] == "go" && f[1] == "run":
				sub := f[3]
				run(t, "go run ./cmd/haproxy-k8s-sync help | grep -- '"+sub+" ' >/dev/null")
			case f[0] == "curl":
				if !strings.Contains(c, "Authorization: Bearer $WEBHOOK_TOKEN") || !strings.Contains(c, "/reconcile") {
					t.Errorf("the curl example does not POST /reconcile with the token: %s", c)
				}
			case f[0] == "kubectl" && (f[1] == "create" || f[1] == "apply"):
				run(t, c+" --dry-run=server -o name >/dev/null")
			case f[0] == "helm" && f[1] == "install":
				run(t, "helm template"+strings.TrimPrefix(c, "helm install")+" >/dev/null")
			default:
				t.Errorf("no rule to check this README command: %s", c)
			}
		})
	}
}

var citedTest = regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)`")

// TestReadmeCitesRealTests: every test, benchmark or fuzz target README.md
// cites as evidence exists, so a claim cannot outlive the test behind it.
func TestReadmeCitesRealTests(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
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
	cited := citedTest.FindAllSubmatch(readme, -1)
	if len(cited) < 10 {
		t.Fatalf("only %d tests cited in README.md", len(cited))
	}
	for _, m := range cited {
		if !defined[string(m[1])] {
			t.Errorf("README.md cites %s, which no test file defines", m[1])
		}
	}
}
