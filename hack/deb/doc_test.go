package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// installSection is docs/install.md's section for the HAProxy host.
func installSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## On the HAProxy host (Debian package)\n")
	if !ok {
		t.Fatal(`docs/install.md has no "## On the HAProxy host (Debian package)"`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

// block returns the body of the fenced block that follows marker in text.
func block(t *testing.T, text, marker string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, marker+"\n```")
	if !ok {
		t.Fatalf("no fenced block right after %q", marker)
	}
	_, body, _ := strings.Cut(after, "\n") // the fence's language
	body, _, ok = strings.Cut(body, "```")
	if !ok {
		t.Fatalf("the block after %q is not closed", marker)
	}
	return body
}

var (
	// packagePath is an absolute path where the package puts files.
	packagePath = regexp.MustCompile(`(?:/usr/bin|/lib/systemd|/etc/default|/etc/haproxy-k8s-sync)[A-Za-z0-9/._-]*`)
	// envSetting is a variable's value quoted in backticks.
	envSetting = regexp.MustCompile("`([A-Z][A-Z0-9_]*)=([^`]*)`")
)

// TestInstallDocMatchesThePackage: docs/install.md's HAProxy-host section
// names what the package installs (paths, unit, user), quotes the
// environment file's values as they are, and its host commands use them:
// the package's file name, the user's group on the kubeconfig and token,
// the kubeconfig where the environment file looks, the token where the
// kubeconfig looks, the unit's name, its user and environment file.
func TestInstallDocMatchesThePackage(t *testing.T) {
	pkg(t)
	sec := installSection(t)
	for _, want := range []string{binaryPath, unitPath, envPath, confDir + "/", "user and group `" + user + "`", "deploy/overlays/haproxy-host"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the section does not name %s", want)
		}
	}
	known := map[string]bool{binaryPath: true, unitPath: true, envPath: true, confDir: true, confDir + "/": true,
		kubeconfig: true, confDir + "/token": true, confDir + "/webhook-token": true}
	for _, p := range packagePath.FindAllString(sec, -1) {
		if !known[p] {
			t.Errorf("the section names %s, which the package neither installs nor makes", p)
		}
	}
	set, _ := envFile(t)
	for _, m := range envSetting.FindAllStringSubmatch(sec, -1) {
		if v, ok := set[m[1]]; ok && v != m[2] {
			t.Errorf("the section quotes %s=%s; the environment file sets %s", m[1], m[2], v)
		}
	}

	kc := block(t, sec, "<!-- kubeconfig: run by TestHAProxyHostPath -->")
	tokenFile := regexp.MustCompile(`set users\.` + user + `\.tokenFile (\S+)`).FindStringSubmatch(kc)
	if tokenFile == nil || filepath.Dir(tokenFile[1]) != confDir {
		t.Fatalf("the kubeconfig names no token file in %s:\n%s", confDir, kc)
	}

	host := block(t, sec, "<!-- host: checked by TestInstallDocMatchesThePackage -->")
	u, err := parseUnit(mustRead(t, filepath.Join(built.root, unitPath)))
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(host), "\n") {
		line, _, _ = strings.Cut(line, " # ")
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "apt" && f[1] == "install":
			if ok, _ := filepath.Match(strings.TrimPrefix(f[2], "./"), fileName(release(t), "amd64")); !ok {
				t.Errorf("%q does not install %s", line, fileName(release(t), "amd64"))
			}
		case f[0] == "install":
			// install -m 0640 -o root -g GROUP SRC DST
			if len(f) != 9 || f[2] != "0640" || f[4] != "root" || f[6] != user {
				t.Errorf("%q: want install -m 0640 -o root -g %s SRC DST (readable by the service, by nobody else)", line, user)
				continue
			}
			installed[f[8]] = true
		case f[0] == "editor":
			if f[1] != envPath {
				t.Errorf("%q edits another file than %s", line, envPath)
			}
		case f[0] == "systemd-run":
			// The dry run runs as the unit does.
			if !strings.Contains(line, "-p User="+u.one(t, "Service", "User")+" ") ||
				!strings.Contains(line, "-p EnvironmentFile="+u.one(t, "Service", "EnvironmentFile")+" ") ||
				!strings.HasSuffix(line, " "+binaryPath+" reconcile --dry-run") {
				t.Errorf("%q does not run %s reconcile --dry-run as the unit runs it", line, binaryPath)
			}
		case f[0] == "systemctl" || f[0] == "journalctl":
			unit := f[len(f)-1]
			if i := slices.Index(f, "-u"); i >= 0 && i+1 < len(f) {
				unit = f[i+1]
			}
			if unit != filepath.Base(unitPath) {
				t.Errorf("%q names %s, not the package's unit %s", line, unit, filepath.Base(unitPath))
			}
		default:
			t.Errorf("no rule checks %q: give it one here", line)
		}
	}
	for _, want := range []string{set["KUBECONFIG"], tokenFile[1]} {
		if !installed[want] {
			t.Errorf("the host commands do not install %s (the environment file's KUBECONFIG and the kubeconfig's token file): %v", want, installed)
		}
	}

	line := strings.TrimSpace(block(t, sec, "<!-- stats socket: run by TestServiceReachesTheSocketAsGroupHAProxy -->"))
	if sock := strings.TrimPrefix(set["HAPROXY_RUNTIME_URL"], "unix://"); !strings.HasPrefix(line, "stats socket "+sock+" ") {
		t.Errorf("the stats socket line %q is not the environment file's socket %s", line, sock)
	}
	for _, want := range []string{" mode 660 ", " level admin ", " group haproxy"} {
		if !strings.Contains(line+" ", want) {
			t.Errorf("the stats socket line %q lacks %q", line, strings.TrimSpace(want))
		}
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
