// Command soakcover sums coverage profiles (go test -coverprofile, and
// go tool covdata textfmt of the binaries the serve histories ran) by
// package: what share of each deciding package's statements a soak reached,
// and of all of them. Go counts statements, not branches.
//
//	go run ./hack/soakcover bin/soak.cover [bin/serve.cover]
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: soakcover PROFILE...")
		os.Exit(2)
	}
	var rs []io.Reader
	for _, p := range os.Args[1:] {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		rs = append(rs, f, strings.NewReader("\n"))
	}
	fmt.Println(summarize(io.MultiReader(rs...)))
}

// summarize is the coverage line of profile r.
func summarize(r io.Reader) string {
	// A block may appear once per test binary run: count it covered if
	// any run reached it.
	type block struct {
		stmts   int
		reached bool
	}
	blocks := map[string]*block{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			continue
		}
		n, err1 := strconv.Atoi(fields[1])
		c, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			continue
		}
		b := blocks[fields[0]]
		if b == nil {
			b = &block{stmts: n}
			blocks[fields[0]] = b
		}
		b.reached = b.reached || c > 0
	}
	total, reached := map[string]int{}, map[string]int{}
	for id, b := range blocks {
		file, _, _ := strings.Cut(id, ":")
		pkg := path.Base(path.Dir(file))
		total[pkg] += b.stmts
		if b.reached {
			reached[pkg] += b.stmts
		}
	}
	var pkgs []string
	all, allReached := 0, 0
	for p := range total {
		pkgs = append(pkgs, p)
		all += total[p]
		allReached += reached[p]
	}
	if all == 0 {
		return "coverage: none recorded"
	}
	sort.Strings(pkgs)
	var parts []string
	for _, p := range pkgs {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", p, 100*float64(reached[p])/float64(total[p])))
	}
	return fmt.Sprintf("coverage: %.1f%% of the deciding packages' statements (%s)", 100*float64(allReached)/float64(all), strings.Join(parts, ", "))
}
