package deploy

import (
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// codeSpan and linkTarget are dropped before prose is read: brackets
	// in code and a link's own parentheses are not the reader's nesting.
	codeSpan   = regexp.MustCompile("`[^`]*`")
	linkTarget = regexp.MustCompile(`\]\([^)\s]*\)`)
	// measuredRange is how a measurement reads: a range of times, as in
	// "0.53–0.64 s", "326–374 ms" or "339–348 / 341–359 ms". A setting
	// (inter 1.5s, a 30 s timeout) is one value, never a range.
	measuredRange = regexp.MustCompile(`\d+(?:\.\d+)?–\d+(?:\.\d+)?(?: / [\d.–]+)? ?(?:ms|s|µs)\b`)
)

// TestReadmeProseIsPlain: README.md is the front door: no test is named in
// it (the evidence lives in docs/guarantees.md and docs/benchmarks.md) and
// no parenthesis or link opens inside a parenthesis.
func TestReadmeProseIsPlain(t *testing.T) {
	lines := prose(readDoc(t, "README.md"))
	nums := make([]int, 0, len(lines))
	for n := range lines {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for _, n := range nums {
		if m := citedTest.FindString(lines[n]); m != "" {
			t.Errorf("README.md:%d names %s: cite it in docs/, link the page from README", n, m)
		}
	}
	// Parentheses may span lines: read each paragraph whole.
	var para []string
	paraStart := 0
	check := func() {
		text := linkTarget.ReplaceAllString(codeSpan.ReplaceAllString(strings.Join(para, " "), ""), "]")
		depth := 0
		for _, r := range text {
			switch r {
			case '[':
				if depth > 0 { // a link inside parentheses
					t.Errorf("README.md:%d: brackets nest in %q", paraStart, text)
					return
				}
			case '(':
				depth++
				if depth > 1 {
					t.Errorf("README.md:%d: brackets nest in %q", paraStart, text)
					return
				}
			case ')':
				depth = max(depth-1, 0)
			}
		}
	}
	prev := 0
	for _, n := range nums {
		// A table row is read alone: its cells are not one sentence.
		if row := strings.HasPrefix(lines[n], "|"); n != prev+1 || row || strings.HasPrefix(lines[prev], "|") || strings.TrimSpace(lines[n]) == "" {
			check()
			para, paraStart = nil, n
		}
		para = append(para, lines[n])
		prev = n
	}
	check()
}

// TestMeasuredFiguresLiveInBenchmarks: a measured figure lives in
// docs/benchmarks.md alone, with its date, HAProxy version and driver;
// README.md and the other pages state the claim and link there, so two
// pages cannot quote one measurement differently.
func TestMeasuredFiguresLiveInBenchmarks(t *testing.T) {
	if !measuredRange.MatchString(readDoc(t, "docs/benchmarks.md")) {
		t.Fatal("docs/benchmarks.md holds no measured range: the pattern no longer reads figures")
	}
	for _, page := range docPages(t) {
		if page == "docs/benchmarks.md" {
			continue
		}
		for n, line := range strings.Split(readDoc(t, page), "\n") {
			if m := measuredRange.FindString(line); m != "" {
				t.Errorf("%s:%d quotes the measurement %q: move it to docs/benchmarks.md and link it", page, n+1, m)
			}
		}
	}
}
