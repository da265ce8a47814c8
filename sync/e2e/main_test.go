package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
)

const inNetns = "HKS_E2E_IN_NETNS"

// cluster is the API server shared by the tests of this binary.
var cluster struct {
	cfg *rest.Config
	// client sets the cluster up; service is the service's own client.
	client  kubernetes.Interface
	service *kube.Client
}

// podAddrs are added to the namespace's loopback: the test's own pod hosts.
var podAddrs = []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.1.1", "10.244.1.2"}

func TestMain(m *testing.M) {
	if os.Getenv(inNetns) == "" {
		os.Exit(reexecInNetns())
	}
	if err := setupNetns(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: network namespace:", err)
		os.Exit(1)
	}
	env, err := startKube()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// reexecInNetns runs this test binary again in a new network namespace.
func reexecInNetns() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: needs root to create a private network namespace (CI runs as root)")
		return 1
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), inNetns+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "e2e: re-exec:", err)
		return 1
	}
	return 0
}

func setupNetns() error {
	cmds := [][]string{{"link", "set", "lo", "up"}}
	for _, a := range podAddrs {
		cmds = append(cmds, []string{"addr", "add", a + "/32", "dev", "lo"})
	}
	// Pod addresses of the scale benchmarks: all local, without one
	// address each.
	cmds = append(cmds, []string{"route", "add", "local", "10.245.128.0/17", "dev", "lo"})
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", c, err, out)
		}
	}
	return nil
}

// startKube starts etcd and the kube-apiserver built into bin/ by make.
func startKube() (*envtest.Environment, error) {
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	if os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" {
		os.Setenv("TEST_ASSET_KUBE_APISERVER", filepath.Join(root, "bin", "kube-apiserver"))
	}
	if os.Getenv("TEST_ASSET_ETCD") == "" {
		os.Setenv("TEST_ASSET_ETCD", filepath.Join(root, "bin", "etcd"))
	}
	for _, v := range []string{"TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_ETCD"} {
		if _, err := os.Stat(os.Getenv(v)); err != nil {
			return nil, fmt.Errorf("%s: %v (run `make test`, which builds and installs it)", v, err)
		}
	}
	env := &envtest.Environment{}
	// The namespace has no default route, from which the API server would
	// otherwise pick the address it advertises.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	cluster.cfg = cfg
	if cluster.client, err = kubernetes.NewForConfig(cfg); err == nil {
		cluster.service, err = kube.NewClient(cfg)
	}
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}
