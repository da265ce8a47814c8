package memlimit

import (
	"io/fs"
	"runtime/debug"
	"strings"
	"testing"
)

func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if v, ok := m[p]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name      string
		env       string
		files     map[string]string
		want      int64
		why, fail string
	}{
		{name: "the shipped 128Mi, cgroup v2", files: map[string]string{cgroupV2: "134217728\n"}, want: 107374182, why: "80% of the container's 134217728 bytes"},
		{name: "cgroup v1", files: map[string]string{cgroupV1: "268435456\n"}, want: 214748364},
		{name: "no limit, v2", files: map[string]string{cgroupV2: "max\n"}, why: "no memory limit"},
		{name: "no limit, v1", files: map[string]string{cgroupV1: "9223372036854771712\n"}, why: "no memory limit"},
		{name: "no cgroup", files: map[string]string{}, why: "no cgroup memory limit found"},
		{name: "GOMEMLIMIT wins", env: "100MiB", files: map[string]string{cgroupV2: "134217728"}, why: "GOMEMLIMIT is set"},
		{name: "v2 before v1", files: map[string]string{cgroupV2: "134217728", cgroupV1: "1"}, want: 107374182},
		{name: "garbage", files: map[string]string{cgroupV2: "lots"}, fail: `holds "lots"`},
		{name: "zero", files: map[string]string{cgroupV2: "0"}, fail: "not a number of bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why, err := Decide(c.env, files(c.files))
			if c.fail != "" {
				if err == nil || !strings.Contains(err.Error(), c.fail) || got != 0 {
					t.Fatalf("got %d, %v; want an error saying %q", got, err, c.fail)
				}
				return
			}
			if err != nil || got != c.want || !strings.Contains(why, c.why) {
				t.Fatalf("got %d (%q), %v; want %d (%q)", got, why, err, c.want, c.why)
			}
		})
	}
}

// Apply sets the runtime's soft limit to what Decide says, and leaves it
// alone when Decide says none.
func TestApplySetsTheRuntimeLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	if _, _, err := Apply("", files(map[string]string{cgroupV2: "134217728"})); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 107374182 {
		t.Fatalf("runtime limit %d, want 107374182", got)
	}
	if _, _, err := Apply("", files(map[string]string{cgroupV2: "max"})); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 107374182 {
		t.Fatalf("runtime limit changed to %d with no cgroup limit", got)
	}
}
