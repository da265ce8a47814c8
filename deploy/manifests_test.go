package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// The Knative releases whose CRDs the manifests are checked against (their
// Go modules ship the CRD YAML; fetched through the module proxy).
const (
	knativeServing  = "knative.dev/serving@v0.46.0"
	knativeEventing = "knative.dev/eventing@v0.46.0"
)

// api is the real kube-apiserver shared by the tests of this package.
var api struct {
	cfg        *rest.Config
	client     kubernetes.Interface
	kubeconfig string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" {
		os.Setenv("TEST_ASSET_KUBE_APISERVER", tool("kube-apiserver"))
	}
	if os.Getenv("TEST_ASSET_ETCD") == "" {
		os.Setenv("TEST_ASSET_ETCD", tool("etcd"))
	}
	for _, p := range []string{os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD"), tool("kubectl"), tool("helm")} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "deploy: %v (run `make test`, which builds and installs it)\n", err)
			return 1
		}
	}
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: start envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: admin user:", err)
		return 1
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: kubeconfig:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	api.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(api.kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	api.cfg = cfg
	api.client = kubernetes.NewForConfigOrDie(cfg)
	return m.Run()
}

// tool is a binary built into bin/ by hack/build-kube-tools.sh.
func tool(name string) string {
	root, _ := filepath.Abs("..")
	return filepath.Join(root, "bin", name)
}

// kubectl runs bin/kubectl against the test API server as cluster admin.
func kubectl(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool("kubectl"), append([]string{"--kubeconfig", api.kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// helmArgs are helm template's arguments for the chart with args. The chart
// refuses to render without an HAProxy URL, so a test that gives none gets
// the recommended pair of one HAProxy: its Data Plane API and admin socket.
func helmArgs(args []string) []string {
	out := []string{"template", "rel", "helm/haproxy-k8s-sync"}
	if !slices.ContainsFunc(args, func(a string) bool {
		return strings.Contains(a, "haproxy.dataplaneURL") || strings.Contains(a, "haproxy.runtimeURL")
	}) {
		out = append(out, "--set", "haproxy.dataplaneURL=http://haproxy-a:5555", "--set", "haproxy.runtimeURL=tcp://haproxy-a:9999")
	}
	return append(out, args...)
}

// helmRefuses renders the chart and returns helm's output and error, for
// values the chart must refuse.
func helmRefuses(args ...string) ([]byte, error) {
	return exec.Command(tool("helm"), helmArgs(args)...).CombinedOutput()
}

// helm renders the chart with the given extra arguments.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(tool("helm"), helmArgs(args)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// namespace creates a namespace for real (a dry run needs it to exist).
func namespace(t *testing.T, name string) {
	t.Helper()
	_, err := api.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// knativeCRDs installs the CRDs of the Knative kinds the manifests use.
func knativeCRDs(t *testing.T) {
	t.Helper()
	var files []string
	for mod, paths := range map[string][]string{
		knativeServing:  {"config/core/300-resources/service.yaml"},
		knativeEventing: {"config/core/resources/apiserversource.yaml", "config/core/resources/pingsource.yaml"},
	} {
		out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
		if err != nil {
			t.Fatalf("go mod download %s: %v", mod, err)
		}
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
			t.Fatalf("go mod download %s: %s %v", mod, info.Error, err)
		}
		for _, p := range paths {
			files = append(files, "-f", filepath.Join(info.Dir, p))
		}
	}
	kubectl(t, nil, append([]string{"apply", "--server-side"}, files...)...)
	kubectl(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/services.serving.knative.dev", "crd/apiserversources.sources.knative.dev", "crd/pingsources.sources.knative.dev")
}

// objects lists "Kind/name" of every document of a YAML stream.
func objects(t *testing.T, yaml []byte) []string {
	t.Helper()
	out := kubectl(t, yaml, "apply", "--dry-run=client", "-o", "name", "-f", "-")
	return strings.Fields(out)
}

// TestManifestsAcceptedByAPIServer applies every manifest, the kustomize
// trees as built by kustomize and the Helm chart as rendered by helm, with
// server-side dry-run against a real API server (Knative CRDs installed):
// every object must be accepted.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	knativeCRDs(t)
	for _, ns := range []string{"ingress-nginx", "edge", "sync-system"} {
		namespace(t, ns)
	}
	kustomize := func(dir string) []byte { return []byte(kubectl(t, nil, "kustomize", dir)) }
	file := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const (
		sa, cm, svc, secret      = "serviceaccount", "configmap", "service", "secret"
		role, rb                 = "role.rbac.authorization.k8s.io", "rolebinding.rbac.authorization.k8s.io"
		crole, crb               = "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io"
		deploy, pdb, cron        = "deployment.apps", "poddisruptionbudget.policy", "cronjob.batch"
		netpol                   = "networkpolicy.networking.k8s.io"
		ksvc, apisource, pingsrc = "service.serving.knative.dev", "apiserversource.sources.knative.dev", "pingsource.sources.knative.dev"
	)
	cases := []struct {
		name      string
		namespace string // for objects without one; "" when all have one
		yaml      []byte
		wantKinds []string
	}{
		{"deploy/ (example overlay)", "ingress-nginx", kustomize("overlays/example"),
			[]string{sa, role, rb, crole, crb, cm, deploy, pdb, svc, netpol}},
		{"deploy/ with the CronJob component", "ingress-nginx", kustomize(overlay(t, "resources:\n  - %[1]s/overlays/example\ncomponents:\n  - %[1]s/components/cronjob\n", ".")),
			[]string{sa, role, rb, crole, crb, cm, deploy, pdb, svc, netpol, cron}},
		{"deploy/ with the CronJob and kubernetes auth", "ingress-nginx", kustomize(overlay(t,
			"resources:\n  - %[1]s/overlays/example\ncomponents:\n  - %[1]s/components/cronjob\n  - %[1]s/components/kubernetes-auth\n", ".")),
			[]string{sa, role, rb, crole, crb, cm, deploy, pdb, svc, netpol, cron}},
		{"deploy/ with the runtime-tls component", "ingress-nginx", kustomize(overlay(t, "resources:\n  - %[1]s/overlays/example\ncomponents:\n  - %[1]s/components/runtime-tls\n", ".")),
			[]string{sa, role, rb, crole, crb, cm, deploy, pdb, svc, netpol}},
		{"deploy/ for the HAProxy hosts (the Debian package)", "ingress-nginx", kustomize("overlays/haproxy-host"),
			[]string{sa, role, rb, crole, crb, secret}},
		{"deploy/secret.example.yaml", "ingress-nginx", file("secret.example.yaml"), []string{secret}},
		{"knative/", "ingress-nginx", kustomize("../knative/overlays/example"),
			[]string{sa, role, rb, crole, crb, cm, ksvc, apisource, pingsrc}},
		{"helm, default values", "", helm(t, "-n", "ingress-nginx"),
			[]string{secret, sa, role, rb, crole, crb, cm, deploy, pdb, svc}},
		{"helm, kubernetes auth, CronJob, NetworkPolicy, dashboard", "", helm(t, "-n", "ingress-nginx", "--set", "webhook.auth=kubernetes",
			"--set", "cronJob.enabled=true", "--set", "networkPolicy.enabled=true", "--set", "webhook.allowedServiceAccounts={ops/deployer}",
			"--set", "dashboard.enabled=true",
			"--set", "networkPolicy.from[0].namespaceSelector.matchLabels.team=monitoring"),
			[]string{secret, sa, role, rb, crole, crb, cm, deploy, pdb, svc, cron, netpol}},
		{"helm, other values", "", helm(t, "-n", "sync-system",
			"--set", "ingress.namespace=edge", "--set", "ingress.serviceName=edge-lb",
			"--set", "haproxy.dataplaneURL=https://lb-a:5555\\,https://lb-b:5555",
			"--set", "haproxy.runtimeURL=tls://lb-a:9999\\,tls://lb-b:9999", "--set", "haproxy.runtimeTLS.secretName=lb-admin-tls",
			"--set", "haproxy.caConfigMap=haproxy-ca", "--set", "haproxy.targetAddress=pod", "--set", "readinessGate.enabled=true",
			"--set", "haproxy.backends=http=be_http\\,https=be_https", "--set", "haproxy.sendProxyV2=true",
			"--set", "haproxy.deleteGuardPercent=50", "--set", "replicaCount=3",
			"--set", "secret.create=true", "--set", "secret.dataplaneUsername=admin", "--set", "secret.dataplanePassword=pw",
			"--set", "secret.webhookToken=tok-0123456789abcdef", "--set", "cronJob.enabled=true", "--set", "cronJob.schedule=*/2 * * * *",
			"--set", "nodeSelector.kubernetes\\.io/os=linux"),
			// Pod mode: no Nodes ClusterRole.
			[]string{secret, sa, role, rb, cm, deploy, pdb, svc, cron}},
		{"helm, one replica, runtime API only", "", helm(t, "-n", "ingress-nginx", "--set", "replicaCount=1",
			"--set", "haproxy.dataplaneURL=", "--set", "haproxy.runtimeURL=tcp://lb-a:9999"),
			// One replica: no PodDisruptionBudget, which would block node drains.
			[]string{secret, sa, role, rb, crole, crb, cm, deploy, svc}},
		{"helm, no PDB, an existing Secret", "", helm(t, "-n", "ingress-nginx", "--set", "podDisruptionBudget.enabled=false", "--set", "secret.existingSecret=mine"),
			[]string{sa, role, rb, crole, crb, cm, deploy, svc}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			objs := objects(t, tt.yaml)
			kinds := map[string]bool{}
			for _, o := range objs {
				kind, _, _ := strings.Cut(o, "/")
				kinds[kind] = true
			}
			for _, k := range tt.wantKinds {
				if !kinds[k] {
					t.Errorf("no %s among %v", k, objs)
				}
			}
			if len(kinds) != len(tt.wantKinds) {
				t.Errorf("kinds %v, want exactly %v", objs, tt.wantKinds)
			}
			args := []string{"apply", "--server-side", "--dry-run=server", "--field-manager=deploy-test", "-f", "-"}
			if tt.namespace != "" { // the chart names every object's namespace itself
				args = append(args, "-n", tt.namespace)
			}
			out := kubectl(t, tt.yaml, args...)
			for _, o := range objs {
				if !strings.Contains(out, o+" serverside-applied (server dry run)") {
					t.Errorf("%s not accepted:\n%s", o, out)
				}
			}
		})
	}
}

// TestRBACIsLeastPrivilege installs the RBAC of deploy/ and of the chart for
// real, then acts as their ServiceAccounts: the sync's own read of the
// Service, its EndpointSlices and the Nodes works; reading Secrets, listing
// Pods, reading elsewhere and writing anything is forbidden.
func TestRBACIsLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{"rbac-kustomize", "rbac-edge", "rbac-sync", "kube-system"} {
		namespace(t, ns)
	}
	// deploy/rbac through an overlay that sets the namespace and the
	// Service's name, as users do.
	kubectl(t, nil, "apply", "-k", overlay(t, `namespace: rbac-kustomize
resources:
  - %s
patches:
  - target: {kind: Role, name: haproxy-k8s-sync}
    patch: |-
      - op: replace
        path: /rules/0/resourceNames/0
        value: web
`, "rbac"))
	kubectl(t, helm(t, "-n", "rbac-sync", "--set", "ingress.namespace=rbac-edge", "--set", "ingress.serviceName=web", "--show-only", "templates/rbac.yaml"),
		"apply", "-f", "-")
	kubectl(t, nil, "apply", "-n", "rbac-kustomize", "-f", "../knative/base/source-rbac.yaml")

	cases := []struct {
		name, watched, user string
	}{
		{"deploy/", "rbac-kustomize", "system:serviceaccount:rbac-kustomize:haproxy-k8s-sync"},
		{"helm, Service in another namespace", "rbac-edge", "system:serviceaccount:rbac-sync:rel-haproxy-k8s-sync"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			cluster(t, tt.watched)
			as, own := impersonate(t, tt.user), syncClient(t, tt.user)
			src := &kube.Source{Client: own, Namespace: tt.watched, Service: "web", Nodes: true}
			in, err := src.Read(ctx)
			if err != nil {
				t.Fatalf("the sync's read: %v", err)
			}
			if in.Service == nil || len(in.Slices) != 1 || len(in.Nodes) == 0 {
				t.Fatalf("read %d slices %d nodes", len(in.Slices), len(in.Nodes))
			}
			// serve's own watches: the Service by name, its slices, the Nodes.
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wt := &watch.Watcher{Client: own, Namespace: tt.watched, Service: "web", Nodes: true}
			go wt.Run(wctx)
			deadline := time.Now().Add(10 * time.Second)
			for !wt.Established() {
				if time.Now().After(deadline) {
					t.Fatal("the watches were never established")
				}
				time.Sleep(20 * time.Millisecond)
			}
			forbidden(t, as, tt.watched)
		})
	}
	t.Run("kubernetes-auth component: may review tokens", func(t *testing.T) {
		namespace(t, "rbac-ka")
		kubectl(t, nil, "apply", "-k", overlay(t, "namespace: rbac-ka\nresources:\n  - %[1]s/rbac\ncomponents:\n  - %[1]s/components/kubernetes-auth\n", "."))
		as := syncClient(t, "system:serviceaccount:rbac-ka:haproxy-k8s-sync")
		if _, err := as.CreateTokenReview(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "x"}}); err != nil {
			t.Errorf("create tokenreviews: %v", err)
		}
		trigger := impersonate(t, "system:serviceaccount:rbac-ka:haproxy-k8s-sync-trigger")
		if _, err := trigger.CoreV1().Services("rbac-ka").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the trigger's ServiceAccount may read: %v", err)
		}
	})
	t.Run("service-events component: may write Events in its namespace only", func(t *testing.T) {
		namespace(t, "rbac-ev")
		kubectl(t, nil, "apply", "-k", overlay(t, "namespace: rbac-ev\nresources:\n  - %[1]s/rbac\ncomponents:\n  - %[1]s/components/service-events\n", "."))
		own := syncClient(t, "system:serviceaccount:rbac-ev:haproxy-k8s-sync")
		now := metav1.Now()
		ev, err := own.CreateEvent(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "rbac-ev"},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Name: "web", Namespace: "rbac-ev"}, Reason: "ServersAdded", Count: 1,
			FirstTimestamp: now, LastTimestamp: now})
		if err != nil {
			t.Fatalf("create events: %v", err)
		}
		if _, err := own.PatchEvent(ctx, "rbac-ev", ev.Name, 2, metav1.Now(), "again"); err != nil {
			t.Errorf("patch events: %v", err)
		}
		as := impersonate(t, "system:serviceaccount:rbac-ev:haproxy-k8s-sync")
		if _, err := as.CoreV1().Events("kube-system").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "x.1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Name: "x", Namespace: "kube-system"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create an event elsewhere: %v, want forbidden", err)
		}
		if err := as.CoreV1().Events("rbac-ev").Delete(ctx, ev.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("delete an event: %v, want forbidden", err)
		}
	})
	t.Run("readiness-gate component: may read pods and set their status, in its namespace only", func(t *testing.T) {
		namespace(t, "rbac-gate")
		kubectl(t, nil, "apply", "-k", overlay(t, "namespace: rbac-gate\nresources:\n  - %[1]s/rbac\ncomponents:\n  - %[1]s/components/readiness-gate\n", "."))
		if _, err := api.client.CoreV1().Pods("rbac-gate").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		own := syncClient(t, "system:serviceaccount:rbac-gate:haproxy-k8s-sync")
		if _, err := own.GetPod(ctx, "rbac-gate", "web-0"); err != nil {
			t.Errorf("get pods: %v", err)
		}
		if err := own.PatchPodCondition(ctx, "rbac-gate", "web-0", corev1.PodCondition{Type: "haproxy-k8s-sync.io/in-service", Status: corev1.ConditionTrue}); err != nil {
			t.Errorf("patch pods/status: %v", err)
		}
		as := impersonate(t, "system:serviceaccount:rbac-gate:haproxy-k8s-sync")
		if _, err := as.CoreV1().Pods("rbac-gate").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list pods: %v, want forbidden", err)
		}
		if _, err := as.CoreV1().Pods("rbac-gate").Patch(ctx, "web-0", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("patch a pod (not its status): %v, want forbidden", err)
		}
		if _, err := as.CoreV1().Pods("kube-system").Get(ctx, "any", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get a pod elsewhere: %v, want forbidden", err)
		}
	})
	t.Run("knative ApiServerSource", func(t *testing.T) {
		as := impersonate(t, "system:serviceaccount:rbac-kustomize:haproxy-k8s-sync-source")
		if _, err := as.DiscoveryV1().EndpointSlices("rbac-kustomize").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list endpointslices: %v", err)
		}
		w, err := as.DiscoveryV1().EndpointSlices("rbac-kustomize").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("watch endpointslices: %v", err)
		} else {
			w.Stop()
		}
		if _, err := as.CoreV1().Secrets("rbac-kustomize").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets: %v, want forbidden", err)
		}
	})
}

func impersonate(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(impersonated(user))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// syncClient is the service's own client, acting as user.
func syncClient(t *testing.T, user string) *kube.Client {
	t.Helper()
	c, err := kube.NewClient(impersonated(user))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func impersonated(user string) *rest.Config {
	cfg := rest.CopyConfig(api.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// cluster creates, as admin, a Service "web" with one EndpointSlice in ns,
// and a Node.
func cluster(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	c := api.client
	if _, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port, name, node := int32(8080), "http", ns+"-node"
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// forbidden checks that as can do nothing beyond the sync's reads.
func forbidden(t *testing.T, as kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	checks := map[string]func() error{
		"get secrets":               func() error { _, err := as.CoreV1().Secrets(ns).Get(ctx, "any", metav1.GetOptions{}); return err },
		"list secrets":              func() error { _, err := as.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"list pods":                 func() error { _, err := as.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err },
		"list pods, all namespaces": func() error { _, err := as.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
		"list services":             func() error { _, err := as.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); return err },
		"get a service elsewhere": func() error {
			_, err := as.CoreV1().Services("kube-system").Get(ctx, "web", metav1.GetOptions{})
			return err
		},
		"list endpointslices elsewhere": func() error {
			_, err := as.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"watch endpointslices elsewhere": func() error {
			w, err := as.DiscoveryV1().EndpointSlices("kube-system").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"watch every service": func() error {
			w, err := as.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"watch another service by name": func() error {
			w, err := as.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=other"})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"get another service": func() error { _, err := as.CoreV1().Services(ns).Get(ctx, "other", metav1.GetOptions{}); return err },
		"watch pods":          func() error { _, err := as.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{}); return err },
		"delete the service":  func() error { return as.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}) },
		"delete an endpointslice": func() error {
			return as.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-1", metav1.DeleteOptions{})
		},
		"create a configmap": func() error {
			_, err := as.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		},
		"get a pod (POD_READINESS_GATE is off)": func() error { _, err := as.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{}); return err },
		"patch a pod's status (POD_READINESS_GATE is off)": func() error {
			_, err := as.CoreV1().Pods(ns).Patch(ctx, "web-0", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{}, "status")
			return err
		},
		"create an event (SERVICE_EVENTS is off)": func() error {
			_, err := as.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1"},
				InvolvedObject: corev1.ObjectReference{Kind: "Service", Name: "web", Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
		"create a tokenreview": func() error {
			_, err := as.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "x"}}, metav1.CreateOptions{})
			return err
		},
		"label a node": func() error {
			_, err := as.CoreV1().Nodes().Patch(ctx, ns+"-node", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"delete a node": func() error { return as.CoreV1().Nodes().Delete(ctx, ns+"-node", metav1.DeleteOptions{}) },
	}
	for name, f := range checks {
		if err := f(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", name, err)
		}
	}
}

// overlay writes a kustomization from format, whose %s (or %[1]s) is the
// path of deploy/'s directory dir relative to it, and returns its directory.
func overlay(t *testing.T, format, dir string) string {
	t.Helper()
	o := t.TempDir()
	abs, _ := filepath.Abs(dir)
	rel, err := filepath.Rel(o, abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o, "kustomization.yaml"), []byte(fmt.Sprintf(format, rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestExampleOverlayNamesTheServiceInTheRole: the Role may watch only the
// followed Service, so a copy of the example overlay that follows another
// Service must grant that one: the overlay copies the name from the ConfigMap.
func TestExampleOverlayNamesTheServiceInTheRole(t *testing.T) {
	example, err := os.ReadFile("overlays/example/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied := strings.Replace(string(example), "../../base", "%s", 1)
	copied = strings.Replace(copied, `value: "ingress-nginx"`, `value: "edge-lb"`, 1)
	copied = strings.Replace(copied, "  - networkpolicy.yaml\n", "", 1) // a file beside the original
	out := kubectl(t, nil, "kustomize", overlay(t, strings.ReplaceAll(copied, "%s", "%[1]s"), "base"))
	if !strings.Contains(out, "INGRESS_SERVICE_NAME: edge-lb") {
		t.Fatalf("the copy does not follow edge-lb:\n%s", out)
	}
	if !strings.Contains(out, "resourceNames:\n  - edge-lb\n  resources:\n  - services") {
		t.Errorf("the Role does not name edge-lb:\n%s", out)
	}
}

// TestChartRefusesOpenOrShortTokens: the chart fails at render time rather
// than install a service that would refuse to start, or several replicas of
// the runtime API driver, whose writes carry no version.
func TestChartRefusesOpenOrShortTokens(t *testing.T) {
	for name, args := range map[string][]string{
		"token auth with no Secret":    {"--set", "secret.create=false"},
		"a short token":                {"--set", "secret.webhookToken=short"},
		"an unknown auth mode":         {"--set", "webhook.auth=oauth"},
		"runtime API only, 2 replicas": {"--set", "haproxy.dataplaneURL=", "--set", "haproxy.runtimeURL=tcp://h:9999"},
		// Any pod's ServiceAccount can get a token for the default audience.
		"kubernetes auth open to any pod": {"--set", "webhook.auth=kubernetes"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helmRefuses(args...)
			if err == nil || !strings.Contains(string(out), "webhook") && !strings.Contains(string(out), "Token") && !strings.Contains(string(out), "replicaCount 1") {
				t.Errorf("rendered: %v\n%s", err, out)
			}
		})
	}
}

// TestChartKnobs renders the chart with the knobs operators look for and
// checks each reaches the objects it should.
func TestChartKnobs(t *testing.T) {
	out := string(helm(t,
		"--set", "image.digest=sha256:0123456789abcdef",
		"--set-json", `imagePullSecrets=[{"name":"regcred"}]`,
		"--set", "podAnnotations.team=edge", "--set", "podLabels.tier=lb",
		"--set-json", `extraEnv=[{"name":"GOMEMLIMIT","value":"100MiB"}]`,
		"--set-json", `extraVolumes=[{"name":"extra","emptyDir":{}}]`,
		"--set-json", `extraVolumeMounts=[{"name":"extra","mountPath":"/extra"}]`,
		"--set", "serviceAccount.annotations.iam=role",
		"--set", "securityContext.readOnlyRootFilesystem=false",
		"--set", "readinessProbe.periodSeconds=7",
		"--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "prometheusRule.noSuccessFor=1h", "--set", "cronJob.enabled=true", "--set", "serviceEvents.enabled=true",
		"--set-json", `haproxy.dataplaneURL=["http://a:5555","http://b:5555"]`,
		"--set-json", `haproxy.runtimeURL=["tcp://a:9999","tcp://b:9999"]`))
	for _, want := range []string{
		"image: ghcr.io/haproxy-k8s-sync/haproxy-k8s-sync:" + releaseVersion(t) + "@sha256:0123456789abcdef", // tag from appVersion
		"- name: regcred", "team: edge", "tier: lb", "name: GOMEMLIMIT", "mountPath: /extra", "emptyDir: {}",
		"iam: role", "readOnlyRootFilesystem: false", "periodSeconds: 7",
		`HAPROXY_DATAPLANE_URL: "http://a:5555,http://b:5555"`, `HAPROXY_RUNTIME_URL: "tcp://a:9999,tcp://b:9999"`,
		"kind: ServiceMonitor", "kind: PodMonitor", "kind: PrometheusRule",
		"haproxy_k8s_sync_last_success_timestamp_seconds", "> 3600", `why="guarded"`, `why="waiting"`, "skipped_endpoints",
		`resources: ["events"]`, `SERVICE_EVENTS: "true"`,
		"histogram_quantile(0.99, sum by (target, le) (rate(haproxy_k8s_sync_network_programming_duration_seconds_bucket", "[10m]))) > 10\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered chart lacks %q", want)
		}
	}
	if n := strings.Count(out, "- name: regcred"); n != 2 {
		t.Errorf("imagePullSecrets in %d pod specs, want 2 (Deployment, CronJob)", n)
	}
	def := string(helm(t))
	for _, absent := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule", "imagePullSecrets", "@sha256", `resources: ["events"]`} {
		if strings.Contains(def, absent) {
			t.Errorf("default render has %s", absent)
		}
	}

	gated := string(helm(t, "--set", "haproxy.targetAddress=pod", "--set", "readinessGate.enabled=true", "--set", "haproxy.dataplaneURL=http://haproxy:5555", "--set", "haproxy.runtimeURL=tcp://haproxy:9999"))
	for _, want := range []string{`resources: ["pods"]`, `verbs: ["get"]`, `resources: ["pods/status"]`, `verbs: ["patch"]`, `POD_READINESS_GATE: "true"`} {
		if !strings.Contains(gated, want) {
			t.Errorf("readinessGate.enabled render lacks %q", want)
		}
	}
	if strings.Contains(def, `resources: ["pods`) {
		t.Error("the default render may read pods")
	}

	byName := string(helm(t, "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=existing"))
	if strings.Contains(byName, "kind: ServiceAccount\n") && strings.Contains(byName, "name: existing\n  namespace") {
		t.Error("serviceAccount.create=false still creates it")
	}
	if strings.Count(byName, ": existing") < 3 {
		t.Errorf("the existing ServiceAccount is not used by the Deployment and bindings:\n%s", grepLines(byName, "existing"))
	}
	for name, args := range map[string][]string{
		"latest tag":                    {"--set", "image.tag=latest"},
		"no name for an existing SA":    {"--set", "serviceAccount.create=false"},
		"a bad alert duration":          {"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.noSuccessFor=soon"},
		"a readiness gate in node mode": {"--set", "readinessGate.enabled=true"},
		"a schema violation":            {"--set", "replicaCount=two"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := helmRefuses(args...); err == nil {
				t.Errorf("rendered:\n%.300s", out)
			}
		})
	}
}

// TestChartNotes installs the chart as a dry run against the API server and
// checks the notes tell how to see the sync and call it.
func TestChartNotes(t *testing.T) {
	namespace(t, "notes")
	// The Data Plane API alone: the notes say what the sockets would add.
	cmd := exec.Command(tool("helm"), "install", "--dry-run=server", "--kubeconfig", api.kubeconfig, "-n", "notes", "rel", "helm/haproxy-k8s-sync",
		"--set", "haproxy.dataplaneURL=http://haproxy:5555")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm install --dry-run: %v\n%s", err, out)
	}
	notes := string(out[strings.Index(string(out), "NOTES:"):])
	for _, want := range []string{"follows Service notes/ingress-nginx", "logs deploy/rel-haproxy-k8s-sync", "WEBHOOK_TOKEN", "/plan", "haproxy.runtimeURL", "docs/drivers.md"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// The page the notes send the reader to exists, with the heading named.
	if page, err := os.ReadFile("../docs/drivers.md"); err != nil || !strings.Contains(string(page), "\n## How the Data Plane API driver applies changes\n") ||
		!strings.Contains(strings.Join(strings.Fields(notes), " "), `("How the Data Plane API driver applies changes")`) {
		t.Errorf("the notes' docs/drivers.md heading is not there (%v)", err)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTwoKustomizeInstallsKeepTheirBindings: copies of the example overlay in
// two namespaces, with the TokenReview component, give every cluster-scoped
// binding a name of its own, bound to its own ServiceAccount.
func TestTwoKustomizeInstallsKeepTheirBindings(t *testing.T) {
	example, err := os.ReadFile("overlays/example/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		copied := strings.Replace(string(example), "../../base", "%[1]s/base", 1)
		copied = strings.Replace(copied, "namespace: ingress-nginx", "namespace: "+ns, 1)
		copied = strings.Replace(copied, "  - networkpolicy.yaml\n", "", 1)
		copied += "components:\n  - %[1]s/components/kubernetes-auth\n"
		out := kubectl(t, nil, "kustomize", overlay(t, copied, "."))
		var bindings []string
		for _, doc := range strings.Split(out, "\n---\n") {
			if !strings.Contains(doc, "kind: ClusterRoleBinding") {
				continue
			}
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Subjects) != 1 || b.Subjects[0].Namespace != ns {
				t.Errorf("%s: binding %s subjects %+v", ns, b.Name, b.Subjects)
			}
			if other, taken := names[b.Name]; taken {
				t.Errorf("%s and %s both install ClusterRoleBinding %s", other, ns, b.Name)
			}
			names[b.Name] = ns
			bindings = append(bindings, b.Name)
		}
		if len(bindings) != 2 {
			t.Errorf("%s: cluster role bindings %v, want nodes and tokenreview", ns, bindings)
		}
	}
}
