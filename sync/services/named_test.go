package services

import (
	"slices"
	"testing"
)

func TestNamedBackends(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{"be_web", []string{"be_web"}},
		{" be_web ", []string{"be_web"}},
		{"https=be_https,http=be_http", []string{"be_http", "be_https"}},
		{"http=be_http, 443 = be_https ,", []string{"be_http", "be_https"}},
		{"http=be,https=be", []string{"be"}},
		// A bare name among PORT=BACKEND items is not a backend.
		{"be_web,http=be_http", []string{"be_http"}},
		{"", nil},
		{"http=", nil},
		{"http=be web", nil},
		{"http=be/x,https=ok.name:1", []string{"ok.name:1"}},
		{"x=" + string(make([]byte, 128)), nil},
	}
	for _, tt := range tests {
		if got := NamedBackends(tt.value); !slices.Equal(got, tt.want) {
			t.Errorf("NamedBackends(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
	many := ""
	for i := range 100 {
		many += "p" + string(rune('0'+i%10)) + "=be" + string(rune('a'+i/10)) + string(rune('a'+i%10)) + ","
	}
	if got := NamedBackends(many); len(got) != MaxNamedBackends {
		t.Errorf("%d backends read from a long annotation, want the bound %d", len(got), MaxNamedBackends)
	}
}
