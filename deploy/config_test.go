package deploy

import (
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// notInConfigMap are the variables the ConfigMaps leave out on purpose:
// taken from the pod's namespace, set by Knative, in-cluster, or secret.
var notInConfigMap = map[string]bool{
	"INGRESS_NAMESPACE": true, "PORT": true, "KUBECONFIG": true, "KUBE_CONTEXT": true,
	"HAPROXY_DATAPLANE_USERNAME": true, "HAPROXY_DATAPLANE_PASSWORD": true,
	"HAPROXY_DATAPLANE_TOKEN": true, "WEBHOOK_TOKEN": true, "WEBHOOK_TOKEN_FILE": true,
}

// TestConfigMapsHaveEveryVariable: the ConfigMap of deploy/ (also used by
// knative/) and the chart's, rendered with default values, set every other
// variable of the service, and the service accepts them as they are.
func TestConfigMapsHaveEveryVariable(t *testing.T) {
	plain, err := os.ReadFile("config/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{
		"deploy/config": plain,
		"helm":          helm(t, "--show-only", "templates/configmap.yaml"),
	} {
		t.Run(name, func(t *testing.T) {
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal(doc, &cm); err != nil {
				t.Fatal(err)
			}
			ct := reflect.TypeOf(config.Config{})
			for i := range ct.NumField() {
				v := ct.Field(i).Tag.Get("envconfig")
				if v == "" || notInConfigMap[v] {
					continue
				}
				if _, ok := cm.Data[v]; !ok {
					t.Errorf("%s is missing", v)
				}
			}
			for k, v := range cm.Data {
				t.Setenv(k, v)
			}
			t.Setenv("INGRESS_NAMESPACE", "ingress-nginx")
			t.Setenv("WEBHOOK_TOKEN", "from-the-secret-0123456789") // as the Secret gives it
			if _, err := config.Load(); err != nil {
				t.Errorf("the service refuses it: %v", err)
			}
		})
	}
}

// TestExampleSecretIsRefused: deploy/secret.example.yaml applied as it is
// (its placeholder token is long enough) must not give a running service
// that accepts a token everyone can read: the service refuses to start and
// names WEBHOOK_TOKEN.
func TestExampleSecretIsRefused(t *testing.T) {
	plain, err := os.ReadFile("config/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("secret.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	var secret corev1.Secret
	if err := yaml.Unmarshal(plain, &cm); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(example, &secret); err != nil {
		t.Fatal(err)
	}
	if secret.StringData["WEBHOOK_TOKEN"] == "" {
		t.Fatal("the example has no WEBHOOK_TOKEN")
	}
	for k, v := range cm.Data {
		t.Setenv(k, v)
	}
	for k, v := range secret.StringData {
		t.Setenv(k, v)
	}
	t.Setenv("INGRESS_NAMESPACE", "ingress-nginx")
	_, err = config.Load()
	if err == nil || !strings.HasPrefix(err.Error(), "WEBHOOK_TOKEN:") {
		t.Fatalf("the service starts with the example Secret: %v", err)
	}
}
