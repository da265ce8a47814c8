package deploy

import (
	"context"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// rendered is what the RBAC tests read of a rendered install: the rights of
// its ClusterRoles and of its Roles ("resource": verbs, merged and sorted),
// its ClusterRoleBindings' names and its ConfigMap's data.
type rendered struct {
	cluster, namespaced map[string][]string
	bindings            []string
	config              map[string]string
}

func render(t *testing.T, stream []byte) rendered {
	t.Helper()
	r := rendered{cluster: map[string][]string{}, namespaced: map[string][]string{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole // a Role has the same rules
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				t.Fatal(err)
			}
			into := r.cluster
			if meta.Kind == "Role" {
				into = r.namespaced
			}
			for _, rule := range role.Rules {
				for _, res := range rule.Resources {
					into[res] = slices.Compact(slices.Sorted(slices.Values(append(into[res], rule.Verbs...))))
				}
			}
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			r.bindings = append(r.bindings, b.Name)
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			if cm.Name == "haproxy-k8s-sync" || cm.Name == "rel-haproxy-k8s-sync" {
				r.config = cm.Data
			}
		}
	}
	return r
}

var (
	read        = []string{"get", "list", "watch"}
	manyRights  = map[string][]string{"services": read, "endpointslices": read, "nodes": read, "events": {"create", "patch"}}
	classRights = map[string][]string{"services": read, "endpointslices": read, "nodes": read, "events": {"create", "patch"}, "services/status": {"update"}}
	// The single-Service install: Nodes cluster wide (node mode); the one
	// Service by name and the slices of its namespace.
	singleCluster    = map[string][]string{"nodes": read}
	singleNamespaced = map[string][]string{"services": read, "endpointslices": {"list", "watch"}}
)

// TestManyServicesRBAC: the many-Services install, by kustomize component
// or chart value, grants exactly cluster-wide reads of Services,
// EndpointSlices and Nodes and Event writes, and update on services/status
// only with the class; the single-Service install is unchanged.
func TestManyServicesRBAC(t *testing.T) {
	kustomize := func(components ...string) []byte {
		return []byte(kubectl(t, nil, "kustomize", exampleWith(t, "ingress-nginx", components...)))
	}
	many := []string{"--set", "manyServices.enabled=true", "--set", "manyServices.annotationBackends=be_*"}
	class := append(slices.Clone(many), "--set", "manyServices.selection=annotation\\,class", "--set", "manyServices.vip=127.0.0.10")
	tests := []struct {
		name       string
		stream     []byte
		cluster    map[string][]string
		namespaced map[string][]string
		selection  string
	}{
		{"kustomize, default", kustomize(), singleCluster, singleNamespaced, "name"},
		{"helm, default", helm(t), singleCluster, singleNamespaced, "name"},
		{"kustomize, many-services", kustomize("many-services"), manyRights, singleNamespaced, "annotation"},
		{"kustomize, many-services and class", kustomize("many-services", "many-services-class"), classRights, singleNamespaced, "annotation,class"},
		{"helm, manyServices", helm(t, many...), manyRights, singleNamespaced, "annotation"},
		{"helm, manyServices with class", helm(t, class...), classRights, singleNamespaced, "annotation,class"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, tt.stream)
			if !maps.EqualFunc(r.cluster, tt.cluster, slices.Equal) {
				t.Errorf("cluster-wide rights %v, want %v", r.cluster, tt.cluster)
			}
			if !maps.EqualFunc(r.namespaced, tt.namespaced, slices.Equal) {
				t.Errorf("namespaced rights %v, want %v", r.namespaced, tt.namespaced)
			}
			if got := r.config["SERVICE_SELECTION"]; got != tt.selection {
				t.Errorf("SERVICE_SELECTION %q, want %q", got, tt.selection)
			}
			for _, b := range r.bindings {
				// kustomize: name-namespace; helm: release-name-namespace-role.
				if !strings.HasSuffix(b, "-ingress-nginx") && !strings.Contains(b, "-default-") {
					t.Errorf("ClusterRoleBinding %s does not carry its namespace: two installs would share it", b)
				}
			}
		})
	}
	// The single-Service Role still names its one Service.
	if !strings.Contains(string(kustomize("many-services")), `resourceNames:
  - ingress-nginx`) {
		t.Error("the Role lost its resourceNames")
	}
	for name, args := range map[string][]string{
		"annotation without annotationBackends": {"--set", "manyServices.enabled=true"},
		"class without vip":                     {"--set", "manyServices.enabled=true", "--set", "manyServices.selection=class"},
		"class without a Data Plane URL": {"--set", "manyServices.enabled=true", "--set", "manyServices.selection=class",
			"--set", "manyServices.vip=127.0.0.10", "--set", "haproxy.runtimeURL=tcp://h:9999"},
		"an unknown selection": {"--set", "manyServices.enabled=true", "--set", "manyServices.selection=name"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := helmRefuses(args...); err == nil {
				t.Errorf("rendered:\n%.300s", out)
			}
		})
	}
}

// TestManyServicesRightsOnTheAPIServer: applied to an API server, the
// components let the service read Services and slices of any namespace and
// update services/status only with the class component.
func TestManyServicesRightsOnTheAPIServer(t *testing.T) {
	for ns, components := range map[string][]string{
		"many-a": {"many-services"},
		"many-b": {"many-services", "many-services-class"},
	} {
		namespace(t, ns)
		kubectl(t, nil, "apply", "-k", exampleWith(t, ns, components...))
	}
	can := func(t *testing.T, user string, attr authzv1.ResourceAttributes) bool {
		t.Helper()
		sar, err := api.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: &attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, tt := range []struct {
		ns    string
		class bool
	}{{"many-a", false}, {"many-b", true}} {
		user := "system:serviceaccount:" + tt.ns + ":haproxy-k8s-sync"
		t.Run(tt.ns, func(t *testing.T) {
			for _, a := range []authzv1.ResourceAttributes{
				{Verb: "list", Resource: "services"},
				{Verb: "watch", Resource: "services", Namespace: "kube-system"},
				{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"},
				{Verb: "get", Resource: "nodes"},
				{Verb: "create", Resource: "events", Namespace: "default"},
			} {
				if !can(t, user, a) {
					t.Errorf("may not %s %s in %q", a.Verb, a.Resource, a.Namespace)
				}
			}
			status := authzv1.ResourceAttributes{Verb: "update", Resource: "services", Subresource: "status", Namespace: "default"}
			if got := can(t, user, status); got != tt.class {
				t.Errorf("may update services/status: %v, want %v", got, tt.class)
			}
			for _, a := range []authzv1.ResourceAttributes{
				{Verb: "update", Resource: "services", Namespace: "default"},
				{Verb: "patch", Resource: "services", Namespace: "default"},
				{Verb: "list", Resource: "secrets", Namespace: "default"},
				{Verb: "update", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"},
			} {
				if can(t, user, a) {
					t.Errorf("may %s %s", a.Verb, a.Resource)
				}
			}
		})
	}
}

// exampleWith is a copy of overlays/example, as users make theirs, in ns and
// with components listed.
func exampleWith(t *testing.T, ns string, components ...string) string {
	t.Helper()
	example, err := os.ReadFile("overlays/example/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied := strings.Replace(string(example), "../../base", "%[1]s/base", 1)
	copied = strings.Replace(copied, "namespace: ingress-nginx", "namespace: "+ns, 1)
	copied = strings.Replace(copied, "  - networkpolicy.yaml\n", "", 1)
	if len(components) > 0 {
		copied += "components:\n"
		for _, c := range components {
			copied += "  - %[1]s/components/" + c + "\n"
		}
	}
	return overlay(t, copied, ".")
}
