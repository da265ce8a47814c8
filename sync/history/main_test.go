package history

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// inNetnsEnv marks the test binary run again in a network namespace.
const inNetnsEnv = "HKS_HISTORY_IN_NETNS"

// TestMain runs the tests, as root, in a private network namespace (as
// the e2e tests do): pods and Nodes then have addresses Kubernetes takes
// in an EndpointSlice, which serve histories need (a real kube-apiserver
// refuses loopback ones). Without root, the histories run on loopback
// and serve histories are skipped. It stops the kube-apiserver serve
// histories started.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv(inNetnsEnv) != "":
		if err := privateLoopback(); err != nil {
			fmt.Fprintln(os.Stderr, "history: network namespace:", err)
			os.Exit(1)
		}
		usePrivateNet()
	case os.Geteuid() == 0:
		os.Exit(reexecInNetns())
	}
	code := m.Run()
	stopKube()
	os.Exit(code)
}

// reexecInNetns runs this test binary again in a new network namespace.
func reexecInNetns() int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "history: re-exec:", err)
		return 1
	}
	return 0
}

// privateLoopback brings lo up and makes the pods' and Nodes' networks
// local on it.
func privateLoopback() error {
	cmds := [][]string{{"link", "set", "lo", "up"}}
	for _, r := range privateRoutes {
		cmds = append(cmds, []string{"route", "add", "local", r, "dev", "lo"})
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", c, err, out)
		}
	}
	return nil
}
