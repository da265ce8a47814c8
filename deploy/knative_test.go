package deploy

import (
	"crypto/md5"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// knativeBuild is what a kustomize build of knative/ holds, read as far as
// these tests need.
type knativeBuild struct {
	namespace       string
	configMap       corev1.ConfigMap
	container       corev1.Container // the Knative Service's
	serviceAccount  string           // the Knative Service's
	sources         map[string]string
	sourceAccounts  []string // spec.serviceAccountName of the sources
	serviceAccounts []string
}

// readKnativeBuild builds a knative/ kustomization.
func readKnativeBuild(t *testing.T, dir string) knativeBuild {
	t.Helper()
	b := knativeBuild{sources: map[string]string{}}
	for _, doc := range strings.Split(kubectl(t, nil, "kustomize", dir), "\n---\n") {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ConfigMap":
			if err := yaml.Unmarshal([]byte(doc), &b.configMap); err != nil {
				t.Fatal(err)
			}
		case "ServiceAccount":
			b.serviceAccounts = append(b.serviceAccounts, head.Metadata.Name)
		case "Service": // serving.knative.dev: the only Service of the build
			var ksvc struct {
				Spec struct {
					Template struct {
						Spec corev1.PodSpec `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &ksvc); err != nil {
				t.Fatal(err)
			}
			b.namespace = head.Metadata.Namespace
			b.serviceAccount = ksvc.Spec.Template.Spec.ServiceAccountName
			b.container = ksvc.Spec.Template.Spec.Containers[0]
		case "ApiServerSource", "PingSource":
			b.sources[head.Metadata.Name] = head.Kind
			var src struct {
				Spec struct {
					ServiceAccountName string `json:"serviceAccountName"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &src); err != nil {
				t.Fatal(err)
			}
			if src.Spec.ServiceAccountName != "" {
				b.sourceAccounts = append(b.sourceAccounts, src.Spec.ServiceAccountName)
			}
		}
	}
	return b
}

// env is the Knative Service's environment as its container gets it: the
// ConfigMap (envFrom), then env, whose $(NAME) refer to what is defined
// before, as the kubelet expands them. Secrets are left out.
func (b knativeBuild) env() map[string]string {
	out := map[string]string{}
	for k, v := range b.configMap.Data {
		out[k] = v
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range b.container.Env {
		if e.ValueFrom != nil {
			continue
		}
		out[e.Name] = ref.ReplaceAllStringFunc(e.Value, func(m string) string {
			if v, ok := out[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// knativeOIDCServiceAccount is the name of the ServiceAccount Knative
// Eventing v0.46.0 creates for a source's OIDC identity, whose token the
// source sends (the source's status.auth.serviceAccountName): the source's
// name and "-oidc-<group>-<kind>", lower-cased; when that is longer than 63
// characters and the suffix longer than 31 (every ApiServerSource), the
// name's first 31 characters and the hex md5 of name and suffix, padded to 63
// with the start of the suffix; when only the whole is too long, the name cut
// to leave room for its md5 and the suffix.
func knativeOIDCServiceAccount(name, kind string) string {
	const longest, head = 63, 31
	suffix := "-oidc-sources.knative.dev-" + kind
	out := name + suffix
	switch {
	case len(out) <= longest:
	case head-len(suffix) <= 0:
		sum := md5.Sum([]byte(name + suffix))
		out = name[:min(head, len(name))] + hex.EncodeToString(sum[:])
		if d := longest - len(out); d > 0 {
			out += suffix[:d]
		}
		out = strings.TrimRightFunc(out, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		})
	default:
		sum := md5.Sum([]byte(name))
		out = name[:head-len(suffix)] + hex.EncodeToString(sum[:]) + suffix
	}
	return strings.ToLower(out)
}

func TestKnativeOIDCServiceAccountName(t *testing.T) {
	for _, tt := range []struct{ name, kind, want string }{
		// Computed with knative.dev/pkg's kmeta.ChildName at the version
		// Knative Eventing v0.46.0 requires, as its
		// GetOIDCServiceAccountNameForResource calls it.
		{"haproxy-k8s-sync-resync", "PingSource", "haproxy-k8s-sync-resync-oidc-sources.knative.dev-pingsource"},
		{"haproxy-k8s-sync-endpointslices", "ApiServerSource", "haproxy-k8s-sync-endpointslices07ef886acf78e890030ee9df5565f2c5"},
	} {
		if got := knativeOIDCServiceAccount(tt.name, tt.kind); got != tt.want {
			t.Errorf("%s %s: %s, want %s", tt.kind, tt.name, got, tt.want)
		}
	}
}

// TestKnativeAllowsOnlyItsSources: the Knative build, as shipped, checks
// callers by TokenReview and accepts only the OIDC identities of its own
// two sources (anyone who may create a pod can have a token issued for any
// audience), and ships no ServiceAccount that nothing uses.
func TestKnativeAllowsOnlyItsSources(t *testing.T) {
	b := readKnativeBuild(t, "../knative/overlays/example")
	if len(b.sources) != 2 {
		t.Fatalf("sources %v, want an ApiServerSource and a PingSource", b.sources)
	}
	var want []string
	for name, kind := range b.sources {
		want = append(want, b.namespace+"/"+knativeOIDCServiceAccount(name, kind))
	}
	env := b.env()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c, err := config.Load()
	if err != nil {
		t.Fatalf("the service refuses its Knative configuration: %v", err)
	}
	if err := c.RequireWebhookAuth(); err != nil || c.WebhookAuth != config.AuthKubernetes {
		t.Errorf("WEBHOOK_AUTH %q (%v), want kubernetes", c.WebhookAuth, err)
	}
	if wantAud := "serving.knative.dev/service/" + b.namespace + "/haproxy-k8s-sync"; c.WebhookAudience != wantAud {
		t.Errorf("WEBHOOK_AUDIENCE %q, want the Knative Service's %q", c.WebhookAudience, wantAud)
	}
	got := slices.Clone(c.AllowedServiceAccounts)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("WEBHOOK_ALLOWED_SERVICEACCOUNTS %v, want the sources' OIDC identities %v", got, want)
	}
	used := append([]string{b.serviceAccount}, b.sourceAccounts...)
	for _, sa := range b.serviceAccounts {
		if !slices.Contains(used, sa) {
			t.Errorf("ServiceAccount %s is used by nothing (used: %v)", sa, used)
		}
	}
}
