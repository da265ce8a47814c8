// Package memlimit gives the Go runtime a soft memory limit below the
// container's own, when the operator set none (GOMEMLIMIT). Without one the
// heap may grow to twice its live size before a collection: serve at 2,000
// Services peaked at 176 MB resident during their entry against the shipped
// 128 Mi limit (an OOM kill), and at 122 MB with GOMEMLIMIT=100MiB
// (BenchmarkServeManyServices, docs/benchmarks.md).
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// Share is the part of the container's memory limit the Go runtime's
// memory is held to (the soft limit counts the heap, the stacks and what
// the runtime has not given back): the rest is for the binary's pages and
// whatever else the cgroup charges.
const Share = 0.8

// The cgroup files that hold the container's memory limit: v2, then v1.
const (
	cgroupV2 = "/sys/fs/cgroup/memory.max"
	cgroupV1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// unlimitedV1 is above which a v1 limit means none (the kernel writes the
// largest page-aligned int64).
const unlimitedV1 = math.MaxInt64 / 2

// Decide returns the soft limit to set, in bytes, and why: none (0) when
// GOMEMLIMIT is set (the runtime has it) or no cgroup limit could be read.
// gomemlimit is GOMEMLIMIT's value; read reads a file.
func Decide(gomemlimit string, read func(string) ([]byte, error)) (limit int64, why string, err error) {
	if gomemlimit != "" {
		return 0, "GOMEMLIMIT is set", nil
	}
	for _, p := range []string{cgroupV2, cgroupV1} {
		b, rerr := read(p)
		if errors.Is(rerr, fs.ErrNotExist) {
			continue
		}
		if rerr != nil {
			return 0, "", fmt.Errorf("read %s: %w", p, rerr)
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, "no memory limit (" + p + ")", nil
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 {
			return 0, "", fmt.Errorf("%s holds %q, not a number of bytes", p, v)
		}
		if p == cgroupV1 && n >= unlimitedV1 {
			return 0, "no memory limit (" + p + ")", nil
		}
		return int64(float64(n) * Share), fmt.Sprintf("%.0f%% of the container's %d bytes (%s)", Share*100, n, p), nil
	}
	return 0, "no cgroup memory limit found", nil
}

// Apply sets the soft limit Decide returns, if any, and returns it.
func Apply(gomemlimit string, read func(string) ([]byte, error)) (limit int64, why string, err error) {
	limit, why, err = Decide(gomemlimit, read)
	if err == nil && limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit, why, err
}
