// Command deb builds the Debian package of haproxy-k8s-sync for the HAProxy
// host (make deb, make release) with nfpm, no dpkg tooling:
//
//	go run ./hack/deb -arch amd64|arm64 -binary PATH -version V -out DIR
//
// writes DIR/haproxy-k8s-sync_V_ARCH.deb: the binary in /usr/bin, a
// systemd unit that runs `serve` as the system user haproxy-k8s-sync (in
// group haproxy, which owns HAProxy's admin socket), the environment file
// /etc/default/haproxy-k8s-sync (a conffile), and maintainer scripts. The
// packaged files are in files/. Every timestamp is -epoch, so the same
// binary and version give the same bytes.
package main

import (
	"bytes"
	"debug/elf"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// The package's fixed facts, which docs/install.md names and the tests check.
const (
	name        = "haproxy-k8s-sync"
	binaryPath  = "/usr/bin/haproxy-k8s-sync"
	unitPath    = "/lib/systemd/system/haproxy-k8s-sync.service"
	envPath     = "/etc/default/haproxy-k8s-sync"
	confDir     = "/etc/haproxy-k8s-sync"
	kubeconfig  = confDir + "/kubeconfig"
	user        = "haproxy-k8s-sync"
	docDir      = "/usr/share/doc/haproxy-k8s-sync"
	maintainer  = "haproxy-k8s-sync maintainers <maintainers@haproxy-k8s-sync.invalid>"
	homepage    = "https://github.com/haproxy-k8s-sync/haproxy-k8s-sync"
	description = `keeps HAProxy backends equal to a Kubernetes Service's endpoints
haproxy-k8s-sync follows a Kubernetes Service's EndpointSlices (and Nodes)
and keeps the servers of HAProxy backends equal to them, through HAProxy's
admin socket and, optionally, its Data Plane API. This package runs it on
the HAProxy host as a systemd service, next to HAProxy's local admin socket.`
)

//go:embed files
var packaged embed.FS

// machines are the architectures packaged, with the ELF machine their
// binary must be for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// debVersion is what Debian accepts as a version without an epoch: it
// starts with a digit.
var debVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~-]*$`)

type options struct {
	arch, binary, version, out string
	epoch                      time.Time
}

func main() {
	path, err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deb:", err)
		os.Exit(1)
	}
	fmt.Println("deb:", path)
}

// run parses the command line, builds the package and returns its path.
func run(args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet("deb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.arch, "arch", "", "amd64 or arm64")
	fs.StringVar(&o.binary, "binary", "", "the static binary built for -arch")
	fs.StringVar(&o.version, "version", "", "the package's version (the VERSION file)")
	fs.StringVar(&o.out, "out", "bin", "directory to write haproxy-k8s-sync_VERSION_ARCH.deb into")
	epochS := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp, in seconds since 1970 (default $SOURCE_DATE_EPOCH, else the last commit's time)")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	epoch, err := parseEpoch(*epochS)
	if err != nil {
		return "", err
	}
	o.epoch = epoch
	return build(o)
}

// parseEpoch reads seconds since 1970; empty means the last commit's time,
// the Makefile's SOURCE_DATE_EPOCH, so that a run without it is still
// reproducible.
func parseEpoch(s string) (time.Time, error) {
	if s == "" {
		out, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("no -epoch or SOURCE_DATE_EPOCH, and git gives no commit time: %w", err)
		}
		s = strings.TrimSpace(string(out))
	}
	secs, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("-epoch / SOURCE_DATE_EPOCH %q: want seconds since 1970: %w", s, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// fileName is the package's file name, Debian's NAME_VERSION_ARCH.deb.
func fileName(version, arch string) string {
	return fmt.Sprintf("%s_%s_%s.deb", name, version, arch)
}

// build writes the package into o.out and returns its path.
func build(o options) (string, error) {
	want, ok := machines[o.arch]
	if !ok {
		return "", fmt.Errorf("-arch %q: want amd64 or arm64", o.arch)
	}
	if !debVersion.MatchString(o.version) {
		return "", fmt.Errorf("-version %q: a Debian version starts with a digit and holds only letters, digits and .+~-", o.version)
	}
	if err := checkBinary(o.binary, want); err != nil {
		return "", err
	}
	// nfpm reads every packaged file from disk: the embedded ones are
	// written out first.
	src, err := os.MkdirTemp("", "deb-files")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := writeFiles(src); err != nil {
		return "", err
	}
	info := packageInfo(o, src)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(o.out, fileName(o.version, o.arch))
	var buf bytes.Buffer
	if err := deb.Default.Package(nfpm.WithDefaults(info), &buf); err != nil {
		return "", fmt.Errorf("package: %w", err)
	}
	// Through a temporary file: a failed run leaves no half package.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// checkBinary refuses a binary built for another architecture than the
// package says: dpkg would install it and it would not run.
func checkBinary(path string, want elf.Machine) error {
	if path == "" {
		return errors.New("-binary is required")
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("-binary %s: %w", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("-binary %s is for %s, not %s", path, f.Machine, want)
	}
	return nil
}

// writeFiles copies the embedded files/ into dir.
func writeFiles(dir string) error {
	return fs.WalkDir(packaged, "files", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := packaged.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, d.Name()), b, 0o644)
	})
}

// packageInfo is the package: its control fields, contents and scripts,
// every mode and owner set here rather than taken from the checkout.
func packageInfo(o options, src string) *nfpm.Info {
	file := func(from, to string, mode os.FileMode, typ string) *files.Content {
		return &files.Content{Source: filepath.Join(src, from), Destination: to, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: o.epoch}}
	}
	bin := file("", binaryPath, 0o755, files.TypeFile)
	bin.Source = o.binary
	return &nfpm.Info{
		Name:     name,
		Arch:     o.arch,
		Platform: "linux",
		Version:  o.version,
		// The version as given: nfpm's semver parsing would move a
		// pre-release behind a ~ and change the file name make release
		// expects.
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maintainer,
		Homepage:      homepage,
		License:       "Apache-2.0",
		Description:   description,
		MTime:         o.epoch,
		// A -binary path is a path, not a pattern.
		DisableGlobbing: true,
		Overridables: nfpm.Overridables{
			// The package is for the HAProxy host, but HAProxy may come from
			// elsewhere than Debian's package, or the service may reach a
			// remote one (tls://): recommended, not required.
			Recommends: []string{"haproxy"},
			Contents: files.Contents{
				bin,
				file("haproxy-k8s-sync.service", unitPath, 0o644, files.TypeFile),
				// Root's alone: it may hold the Data Plane password, and
				// systemd reads it as root.
				file("haproxy-k8s-sync.default", envPath, 0o600, files.TypeConfig),
				file("copyright", docDir+"/copyright", 0o644, files.TypeFile),
			},
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(src, "postinst"),
				PreRemove:   filepath.Join(src, "prerm"),
				PostRemove:  filepath.Join(src, "postrm"),
			},
			Deb: nfpm.Deb{
				// gzip: every dpkg reads it (zstd needs dpkg 1.21.18).
				Compression: "gzip",
			},
		},
	}
}
