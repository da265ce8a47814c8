package config

import (
	"reflect"
	"testing"
)

// TestEveryFieldReadIsDocumented: a Config field envconfig would read from
// the environment is one help lists, with a name and a meaning; the rest
// are ignored. Untagged fields were read as BYANNOTATION, VIPS, ... with no
// meaning, and VIPS=x stopped the start.
func TestEveryFieldReadIsDocumented(t *testing.T) {
	ty := reflect.TypeOf(Config{})
	for i := range ty.NumField() {
		f := ty.Field(i)
		if !f.IsExported() || f.Tag.Get("ignored") == "true" {
			continue
		}
		if f.Tag.Get("envconfig") == "" || f.Tag.Get("desc") == "" {
			t.Errorf("Config.%s is read from the environment without a documented variable (envconfig and desc tags), or must be ignored:\"true\"", f.Name)
		}
	}
}

func TestInternalNamesAreNotRead(t *testing.T) {
	t.Setenv("VIPS", "x")
	t.Setenv("BYCLASS", "x")
	t.Setenv("HAPROXY_RUNTIME_URL", "unix:///run/haproxy.sock")
	if _, err := Load(); err != nil {
		t.Fatalf("VIPS and BYCLASS are no variables of the service, yet Load failed: %v", err)
	}
}
