package cut

import (
	"testing"
	"unicode/utf8"
)

func TestTo(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer text", 6, "a long" + Marker},
		{"héllo", 2, "h" + Marker}, // é is two bytes: not split
		{"héllo", 3, "hé" + Marker},
		{"", 0, ""},
	} {
		got := To(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("To(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("To(%q, %d) is not valid UTF-8", tc.s, tc.n)
		}
	}
}
