package dataplanetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"sigs.k8s.io/yaml"
)

// spec is the official Data Plane API v3 specification shipped in client-native.
type spec struct {
	router routers.Router
}

// loadSpec parses the spec once per test binary (it is 811 KB and takes a
// quarter of a second); the result is read-only.
var loadSpec = sync.OnceValues(func() (*spec, error) {
	path, err := specPath()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("spec to json: %w", err)
	}
	var v2 openapi2.T
	if err := v2.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("parse spec: %w", err)
	}
	v3, err := openapi2conv.ToV3(&v2)
	if err != nil {
		return nil, fmt.Errorf("convert spec: %w", err)
	}
	mergeAllOf(v3)
	v3.Servers = nil // we route on paths without the /v3 base path
	r, err := gorillamux.NewRouter(v3)
	if err != nil {
		return nil, fmt.Errorf("spec router: %w", err)
	}
	return &spec{router: r}, nil
})

// specPath finds specification/build/haproxy_spec.yaml of the client-native
// version this module requires, in the module cache.
func specPath() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/haproxytech/client-native/v6").Output()
	if err != nil {
		return "", fmt.Errorf("locate client-native (go list -m): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("locate client-native: module not downloaded (run go mod download)")
	}
	return filepath.Join(dir, "specification", "build", "haproxy_spec.yaml"), nil
}

// mergeAllOf gives go-swagger's meaning to "additionalProperties: false" next
// to "allOf" (used by server, backend, ...): the allowed properties are those
// of all the allOf members. In plain JSON Schema the same text would forbid
// every property, which the real API does not do.
func mergeAllOf(doc *openapi3.T) {
	for _, ref := range doc.Components.Schemas {
		mergeMembers(ref.Value)
	}
	for _, ref := range doc.Components.Schemas {
		s := ref.Value
		if s == nil || len(s.AllOf) == 0 || s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			continue
		}
		if s.Properties == nil {
			s.Properties = openapi3.Schemas{}
		}
		for _, member := range s.AllOf {
			if member.Value == nil {
				continue
			}
			for name, p := range member.Value.Properties {
				if _, ok := s.Properties[name]; !ok {
					s.Properties[name] = p
				}
			}
		}
	}
}

var validationOptions = &openapi3filter.Options{
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	MultiError:            true,
	IncludeResponseStatus: true,
	SkipSettingDefaults:   true,
	// go-swagger, which the real API is built with, does not refuse
	// read-only properties in a request: its runtime server add takes
	// name, address and port, which the spec marks read-only
	// (conformance table).
	ExcludeReadOnlyValidations: true,
}

// route finds the operation for r (path under /v3).
func (s *spec) route(r *http.Request) (*routers.Route, map[string]string, error) {
	clone := r.Clone(r.Context())
	clone.URL.Path = strings.TrimPrefix(r.URL.Path, "/v3")
	clone.URL.RawPath = ""
	clone.URL.Host, clone.URL.Scheme, clone.Host = "", "", ""
	return s.router.FindRoute(clone)
}

// validateRequest checks path, query and body against the operation. The body
// is read and put back.
func (s *spec) validateRequest(r *http.Request) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := s.route(r)
	if err != nil {
		return nil, err
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: validationOptions}
	return in, openapi3filter.ValidateRequest(context.Background(), in)
}

// validateResponse checks one response of the operation.
func validateResponse(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options:                validationOptions,
	}
	out.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// mergeMembers gives the same meaning to "additionalProperties: false" on
// an allOf member (bind: bind_params and its own address, name, port): the
// member allows the properties of all the members. A member that is a
// shared definition is replaced by a widened copy, so that other schemas
// using it are not widened.
func mergeMembers(s *openapi3.Schema) {
	if s == nil || len(s.AllOf) < 2 {
		return
	}
	all := openapi3.Schemas{}
	for _, m := range s.AllOf {
		if m.Value != nil {
			for name, p := range m.Value.Properties {
				all[name] = p
			}
		}
	}
	for i, m := range s.AllOf {
		v := m.Value
		if v == nil || v.AdditionalProperties.Has == nil || *v.AdditionalProperties.Has {
			continue
		}
		widened := *v
		widened.Properties = openapi3.Schemas{}
		for name, p := range all {
			widened.Properties[name] = p
		}
		s.AllOf[i] = &openapi3.SchemaRef{Value: &widened}
	}
}
