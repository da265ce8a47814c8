package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The package's file is read with the standard library alone (no nfpm, no
// dpkg): what is checked is what dpkg would read.

// built is the package the tests share: made once from the service built
// for this machine, and its data tree extracted, as dpkg would unpack it.
var built struct {
	once sync.Once
	err  error
	deb  []byte // the .deb
	path string // where run wrote it
	root string // data.tar extracted
	// control and data are the entries of control.tar and data.tar, read
	// once: under -race, decompressing 30 MB takes seconds.
	control, data map[string]entry
	version       string
	arch          string
}

// testEpoch is the -epoch of the shared package.
const testEpoch = 1700000000

// workDir holds what TestMain builds; removed at the end.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deb-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Others (the service run as nobody) must reach the extracted tree.
	_ = os.Chmod(dir, 0o755)
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hostArch is this machine's architecture as the package names it, or ""
// when the package is not built for it.
func hostArch() string {
	if _, ok := machines[runtime.GOARCH]; ok {
		return runtime.GOARCH
	}
	return ""
}

// release is the VERSION file, which make deb and make release package.
func release(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// pkg builds the shared package through the command line make release uses.
func pkg(t *testing.T) {
	t.Helper()
	arch := hostArch()
	if arch == "" {
		t.Skipf("the package is for amd64 and arm64, not %s", runtime.GOARCH)
	}
	version := release(t)
	built.once.Do(func() {
		bin := filepath.Join(workDir, "haproxy-k8s-sync")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "../../cmd/haproxy-k8s-sync")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		// As make deb and make release run it, and outside this test's
		// binary: under -race, packaging 30 MB in it takes most of a minute.
		out := filepath.Join(workDir, "out")
		cmd = exec.Command("go", "run", "./hack/deb", "-arch", arch, "-binary", bin, "-version", version, "-out", out, "-epoch", strconv.Itoa(testEpoch))
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go run ./hack/deb: %v\n%s", err, b)
			return
		}
		path := filepath.Join(out, fileName(version, arch))
		built.path, built.version, built.arch = path, version, arch
		if built.deb, built.err = os.ReadFile(path); built.err != nil {
			return
		}
		if built.control, built.data, built.err = parts(built.deb); built.err != nil {
			return
		}
		built.root = filepath.Join(workDir, "root")
		built.err = extract(built.data, built.root)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
}

// member is one file of an ar archive.
type member struct {
	name string
	data []byte
}

// readAr reads an ar archive (the .deb's outer format): a magic line, then
// per file a 60-byte header and its data, padded to an even length.
func readAr(b []byte) ([]member, error) {
	const magic = "!<arch>\n"
	if !bytes.HasPrefix(b, []byte(magic)) {
		return nil, errors.New("not an ar archive")
	}
	b = b[len(magic):]
	var out []member
	for len(b) > 0 {
		if len(b) < 60 || string(b[58:60]) != "`\n" {
			return nil, fmt.Errorf("bad ar header after %d members", len(out))
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(b[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(b[48:58])))
		if err != nil || 60+size > len(b) {
			return nil, fmt.Errorf("ar member %s: bad size %q", name, b[48:58])
		}
		out = append(out, member{name, b[60 : 60+size]})
		b = b[min(len(b), 60+size+size%2):]
	}
	return out, nil
}

// entry is one entry of a tar archive.
type entry struct {
	hdr  *tar.Header
	body []byte
}

// readTarGz reads a gzip-compressed tar into its entries, by name without
// the leading "./".
func readTarGz(b []byte) (map[string]entry, []string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	tr := tar.NewReader(zr)
	out := map[string]entry{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, order, nil
		}
		if err != nil {
			return nil, nil, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		out[name] = entry{h, body}
		order = append(order, name)
	}
}

// parts splits the .deb into its control and data archives' entries.
func parts(deb []byte) (control, data map[string]entry, err error) {
	ms, err := readAr(deb)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range ms {
		switch m.name {
		case "control.tar.gz":
			control, _, err = readTarGz(m.data)
		case "data.tar.gz":
			data, _, err = readTarGz(m.data)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return control, data, nil
}

// extract unpacks data.tar's entries into root, as dpkg unpacks a package.
func extract(data map[string]entry, root string) error {
	for name, e := range data {
		p := filepath.Join(root, name)
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(e.hdr.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, e.body, os.FileMode(e.hdr.Mode)); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(e.hdr.Mode)); err != nil { // umask
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected entry type %c", name, e.hdr.Typeflag)
		}
	}
	return nil
}

// controlFields parses a control file: "Field: value" lines, continuation
// lines starting with a space.
func controlFields(text string) map[string]string {
	out := map[string]string{}
	last := ""
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasPrefix(line, " ") && last != "" {
			out[last] += "\n" + line
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		last = k
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// TestPackage checks the .deb that make deb and make release build: an ar
// archive of debian-binary, control.tar.gz and data.tar.gz; its control
// fields; the conffile; md5sums that match the files; the files, their
// modes, owners and timestamps; maintainer scripts that sh can parse.
func TestPackage(t *testing.T) {
	pkg(t)
	if want := fileName(built.version, built.arch); filepath.Base(built.path) != want {
		t.Errorf("written as %s, want %s", filepath.Base(built.path), want)
	}
	ms, err := readAr(built.deb)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.name)
	}
	// dpkg requires this order.
	if !slices.Equal(names, []string{"debian-binary", "control.tar.gz", "data.tar.gz"}) {
		t.Fatalf("ar members %q", names)
	}
	if string(ms[0].data) != "2.0\n" {
		t.Errorf("debian-binary %q", ms[0].data)
	}
	control, data := built.control, built.data

	t.Run("control", func(t *testing.T) {
		f := controlFields(string(control["control"].body))
		for k, want := range map[string]string{"Package": "haproxy-k8s-sync", "Version": built.version, "Architecture": built.arch,
			"Section": "net", "Priority": "optional", "Recommends": "haproxy", "Homepage": homepage} {
			if f[k] != want {
				t.Errorf("%s: %q, want %q", k, f[k], want)
			}
		}
		if !regexp.MustCompile(`^[^<>]+ <[^@<>\s]+@[^@<>\s]+>$`).MatchString(f["Maintainer"]) {
			t.Errorf("Maintainer %q: want Name <address>", f["Maintainer"])
		}
		// Nothing the HAProxy host may lack: HAProxy itself may come from
		// elsewhere than Debian's package.
		if f["Depends"] != "" || f["Pre-Depends"] != "" {
			t.Errorf("Depends %q, Pre-Depends %q", f["Depends"], f["Pre-Depends"])
		}
		summary, long, _ := strings.Cut(f["Description"], "\n")
		if summary == "" || len(summary) > 80 || !strings.HasPrefix(long, " ") {
			t.Errorf("Description: a summary line and an indented long description, got %q", f["Description"])
		}
		var size int64
		for _, e := range data {
			size += e.hdr.Size
		}
		if kb, _ := strconv.ParseInt(f["Installed-Size"], 10, 64); kb < size/1024 || kb > size/1024+16 {
			t.Errorf("Installed-Size %s KiB for %d bytes of files", f["Installed-Size"], size)
		}
		if got := string(control["conffiles"].body); got != envPath+"\n" {
			t.Errorf("conffiles %q, want %s", got, envPath)
		}
	})

	t.Run("md5sums", func(t *testing.T) {
		listed := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(control["md5sums"].body)), "\n") {
			sum, name, ok := strings.Cut(line, "  ")
			if !ok {
				t.Fatalf("md5sums line %q", line)
			}
			e, ok := data[name]
			got := md5.Sum(e.body)
			if !ok || hex.EncodeToString(got[:]) != sum {
				t.Errorf("md5sums: %s does not match the file in data.tar", name)
			}
			listed[name] = true
		}
		for name, e := range data {
			if e.hdr.Typeflag == tar.TypeReg && !listed[name] {
				t.Errorf("md5sums lacks %s", name)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		want := map[string]int64{
			strings.TrimPrefix(binaryPath, "/"): 0o755,
			strings.TrimPrefix(unitPath, "/"):   0o644,
			// systemd reads it as root; it may hold the Data Plane password.
			strings.TrimPrefix(envPath, "/"):             0o600,
			strings.TrimPrefix(docDir+"/copyright", "/"): 0o644,
		}
		for name, e := range data {
			h := e.hdr
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" {
				t.Errorf("%s owned by %s(%d):%s(%d), want root", name, h.Uname, h.Uid, h.Gname, h.Gid)
			}
			if !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
				t.Errorf("%s: mtime %s, want -epoch", name, h.ModTime.UTC())
			}
			switch h.Typeflag {
			case tar.TypeDir:
				if h.Mode != 0o755 {
					t.Errorf("directory %s mode %o", name, h.Mode)
				}
			case tar.TypeReg:
				mode, ok := want[name]
				if !ok {
					t.Errorf("unexpected file %s", name)
				} else if h.Mode != mode {
					t.Errorf("%s mode %o, want %o", name, h.Mode, mode)
				}
				delete(want, name)
			default:
				t.Errorf("%s: entry type %c", name, h.Typeflag)
			}
		}
		for name := range want {
			t.Errorf("no %s in data.tar", name)
		}
		bin, err := elf.NewFile(bytes.NewReader(data[strings.TrimPrefix(binaryPath, "/")].body))
		if err != nil || bin.Machine != machines[built.arch] {
			t.Errorf("the packaged binary is not an ELF for %s: %v", built.arch, err)
		}
	})

	t.Run("scripts", func(t *testing.T) {
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			e, ok := control[s]
			if !ok {
				t.Errorf("no %s", s)
				continue
			}
			if e.hdr.Mode != 0o755 || !bytes.HasPrefix(e.body, []byte("#!/bin/sh\n")) {
				t.Errorf("%s: mode %o, first line %q", s, e.hdr.Mode, bytes.SplitN(e.body, []byte("\n"), 2)[0])
			}
			p := filepath.Join(t.TempDir(), s)
			if err := os.WriteFile(p, e.body, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
				t.Errorf("sh -n %s: %v\n%s", s, err, out)
			}
		}
		if _, ok := control["preinst"]; ok {
			t.Error("a preinst: nothing needs to happen before the files are unpacked")
		}
	})
}

// unitFile is a systemd unit: section, then key, then the values in order
// (a key may repeat).
type unitFile map[string]map[string][]string

// parseUnit reads a unit file as systemd does: [Section] headers, Key=Value
// lines, # and ; comments, a trailing \ continues the line.
func parseUnit(text string) (unitFile, error) {
	u := unitFile{}
	sec := ""
	cont := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(cont + line)
		cont = ""
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`) + " "
			continue
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			sec = line[1 : len(line)-1]
			u[sec] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == "" {
				return nil, fmt.Errorf("line %d: %q is not Key=Value in a section", i+1, line)
			}
			u[sec][strings.TrimSpace(k)] = append(u[sec][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u, nil
}

// one returns the single value of key in section, failing the test when
// there is not exactly one.
func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Errorf("[%s] %s: %q, want one value", section, key, v)
		return ""
	}
	return v[0]
}

// TestUnit checks the installed unit: it runs the installed binary's serve
// as the package's user, with the environment file (required: a missing
// one stops the start rather than running on defaults), restarts on
// failure, and is confined (read-only system, no home, private /tmp, no
// new privileges, nothing writable). systemd-analyze, where installed,
// verifies it and rates its exposure.
func TestUnit(t *testing.T) {
	pkg(t)
	text, err := os.ReadFile(filepath.Join(built.root, unitPath))
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(text))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Fields(u.one(t, "Service", "ExecStart"))
	if len(start) != 2 || start[0] != binaryPath || start[1] != "serve" {
		t.Errorf("ExecStart %q, want %s serve", start, binaryPath)
	}
	if _, err := os.Stat(filepath.Join(built.root, binaryPath)); err != nil {
		t.Errorf("ExecStart's binary is not in the package: %v", err)
	}
	if !regexp.MustCompile(`(?m)^  serve\b`).MatchString(help(t)) {
		t.Error("the installed binary's help lists no serve command")
	}
	for key, want := range map[string]string{
		"User": user, "Group": user, "EnvironmentFile": envPath, "Restart": "on-failure",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "CapabilityBoundingSet": "", "UMask": "0077",
	} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("[Service] %s=%q, want %q", key, got, want)
		}
	}
	// The service writes no file, and reaching the admin socket needs no
	// write access to /run/haproxy.
	for _, key := range []string{"ReadWritePaths", "StateDirectory", "RuntimeDirectory", "LogsDirectory", "SupplementaryGroups", "DynamicUser"} {
		if v, ok := u["Service"][key]; ok {
			t.Errorf("[Service] %s=%q", key, v)
		}
	}
	if !slices.Contains(strings.Fields(strings.Join(u["Unit"]["After"], " ")), "haproxy.service") {
		t.Errorf("[Unit] After=%q lacks haproxy.service", u["Unit"]["After"])
	}
	if got := u.one(t, "Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("[Install] WantedBy=%q", got)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit is not verified by systemd")
		return
	}
	// systemd checks that ExecStart's binary exists: the copy points at the
	// extracted one.
	dir := t.TempDir()
	unit := filepath.Join(dir, filepath.Base(unitPath))
	if err := os.WriteFile(unit, bytes.ReplaceAll(text, []byte(binaryPath), []byte(filepath.Join(built.root, binaryPath))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", "--man=no", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(analyze, "security", "--offline=true", unit).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	// 0 is fully confined, 10 not at all; what is left open is the
	// network (the Kubernetes API, HAProxy) and the host's file system view.
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2 {
		t.Errorf("exposure %s, want at most 2.0:\n%s", m[1], out)
	}
}

var helpOnce struct {
	sync.Once
	out string
	err error
}

// help is the installed binary's help, run as it is installed.
func help(t *testing.T) string {
	t.Helper()
	helpOnce.Do(func() {
		out, err := exec.Command(filepath.Join(built.root, binaryPath), "help").Output()
		helpOnce.out, helpOnce.err = string(out), err
	})
	if helpOnce.err != nil {
		t.Fatalf("the installed binary does not run: %v", helpOnce.err)
	}
	return helpOnce.out
}

// envLine is a variable of the environment file, set or commented out.
var envLine = regexp.MustCompile(`^(#?)([A-Z][A-Z0-9_]*)=(.*)$`)

// envFile reads the environment file as systemd's EnvironmentFile does
// (KEY=value), and the variables it shows commented out.
func envFile(t *testing.T) (set map[string]string, commented []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(built.root, envPath))
	if err != nil {
		t.Fatal(err)
	}
	set = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if m := envLine.FindStringSubmatch(line); m != nil {
			if m[1] == "#" {
				commented = append(commented, m[2])
			} else {
				set[m[2]] = m[3]
			}
			continue
		}
		if line != "" && line[0] != '#' {
			t.Errorf("%s: %q is not KEY=value (no export, no spaces around =)", envPath, line)
		}
	}
	return set, commented
}

// TestInstalledBinaryAndEnvironment: the package unpacked into a directory
// (as dpkg would, without dpkg) has a binary that runs, and its
// environment file names only variables that binary documents, with the
// values the package's other parts agree on: the kubeconfig in the
// package's directory, the local admin socket, the token postinst makes.
func TestInstalledBinaryAndEnvironment(t *testing.T) {
	pkg(t)
	out, err := exec.Command(filepath.Join(built.root, binaryPath), "version").Output()
	if err != nil || !strings.Contains(string(out), built.version) {
		t.Errorf("version: %v, %q, want %s", err, out, built.version)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  ([A-Z][A-Z0-9_]+)\s`).FindAllStringSubmatch(help(t), -1) {
		documented[m[1]] = true
	}
	if len(documented) < 20 {
		t.Fatalf("help lists %d variables: its format changed?\n%s", len(documented), help(t))
	}
	set, commented := envFile(t)
	for _, name := range append(slices.Sorted(maps.Keys(set)), commented...) {
		if !documented[name] {
			t.Errorf("%s names %s, which `haproxy-k8s-sync help` does not document", envPath, name)
		}
	}
	postinst, err := os.ReadFile("files/postinst")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"KUBECONFIG":          kubeconfig,
		"HAPROXY_RUNTIME_URL": "unix:///run/haproxy/admin.sock",
		"WEBHOOK_TOKEN_FILE":  confDir + "/webhook-token",
	} {
		if set[k] != want {
			t.Errorf("%s=%q, want %q", k, set[k], want)
		}
	}
	if !strings.Contains(string(postinst), "confdir="+confDir+"\n") || !strings.Contains(string(postinst), "token=$confdir/webhook-token\n") {
		t.Errorf("postinst does not make %s/webhook-token, which %s names", confDir, envPath)
	}
}

// smallELF is an executable of this machine, for the tests that only need
// the package's shape: packaging it takes milliseconds.
func smallELF(t *testing.T) (string, string) {
	t.Helper()
	p, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true on PATH")
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Skipf("%s: %v", p, err)
	}
	defer f.Close()
	for arch, m := range machines {
		if m == f.Machine {
			return p, arch
		}
	}
	t.Skipf("%s is for %s", p, f.Machine)
	return "", ""
}

// TestReproducible: the same binary, version and epoch give the same bytes;
// another epoch gives other bytes (the timestamps are the epoch's).
func TestReproducible(t *testing.T) {
	bin, arch := smallELF(t)
	build := func(epoch string) []byte {
		t.Helper()
		path, err := run([]string{"-arch", arch, "-binary", bin, "-version", "1.2.3", "-out", t.TempDir(), "-epoch", epoch}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := build("1700000000"), build("1700000000")
	if !bytes.Equal(a, b) {
		t.Error("two builds of the same inputs differ")
	}
	if bytes.Equal(a, build("1700000001")) {
		t.Error("-epoch changes nothing")
	}
	// Without -epoch: SOURCE_DATE_EPOCH.
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	path, err := run([]string{"-arch", arch, "-binary", bin, "-version", "1.2.3", "-out", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(path); !bytes.Equal(a, c) {
		t.Error("SOURCE_DATE_EPOCH is not the default -epoch")
	}
}

// TestRefusals: what would make a package that does not install or run is
// refused, naming the flag at fault, and nothing is written.
func TestRefusals(t *testing.T) {
	bin, arch := smallELF(t)
	other := "arm64"
	if arch == "arm64" {
		other = "amd64"
	}
	for name, tt := range map[string]struct {
		args []string
		want string
	}{
		"a binary for another architecture": {[]string{"-arch", other, "-binary", bin, "-version", "1.0.0"}, "-binary"},
		"an architecture not packaged":      {[]string{"-arch", "386", "-binary", bin, "-version", "1.0.0"}, "-arch"},
		"a version Debian refuses":          {[]string{"-arch", arch, "-binary", bin, "-version", "v1.0.0"}, "-version"},
		"no binary":                         {[]string{"-arch", arch, "-version", "1.0.0"}, "-binary"},
		"not an executable":                 {[]string{"-arch", arch, "-binary", "main.go", "-version", "1.0.0"}, "-binary"},
		"a bad epoch":                       {[]string{"-arch", arch, "-binary", bin, "-version", "1.0.0", "-epoch", "yesterday"}, "epoch"},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			args := append(tt.args, "-out", out)
			if !slices.Contains(args, "-epoch") {
				args = append(args, "-epoch", "1")
			}
			_, err := run(args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
			if files, _ := os.ReadDir(out); len(files) > 0 {
				t.Errorf("left %v", files)
			}
		})
	}
}

// TestMakeDeb: make deb builds the binary, then packages it for amd64
// into bin/, with the VERSION file's version and the commit's time.
func TestMakeDeb(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	// --no-print-directory: under make test (a make running this test)
	// make says which directory it enters.
	cmd := exec.Command("make", "--no-print-directory", "-n", "deb")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n deb: %v", err)
	}
	text := strings.ReplaceAll(string(out), "\\\n", " ")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "go build") || !strings.Contains(lines[0], "-o bin/haproxy-k8s-sync ./cmd/haproxy-k8s-sync") {
		t.Fatalf("make deb does not build bin/haproxy-k8s-sync first:\n%s", out)
	}
	want := "go run ./hack/deb -arch amd64 -binary bin/haproxy-k8s-sync -version " + release(t) + " -out bin"
	if got := strings.Join(strings.Fields(lines[1]), " "); !strings.Contains(got, want) || !strings.HasPrefix(got, "SOURCE_DATE_EPOCH=") {
		t.Errorf("make deb runs %q, want SOURCE_DATE_EPOCH=... %s", got, want)
	}
}

// logLines reads the calls the stubs recorded.
func logLines(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
