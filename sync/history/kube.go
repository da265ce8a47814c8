package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// The Kubernetes of serve histories (Setup.Serve): a real kube-apiserver
// and etcd (envtest, the binaries make deps builds into bin/), started once
// per test binary, and the world's view written into it as the controllers
// of a cluster would write it (kubeMirror): the Service, its
// EndpointSlices and the Nodes. serve watches and lists them there.

var kubeAPI struct {
	once   sync.Once
	env    *envtest.Environment
	cfg    *rest.Config
	client kubernetes.Interface
	err    error
}

// repoRoot is the module's root, where bin/ is.
func repoRoot() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..")
}

// startKube starts the API server on first use.
func startKube(t testing.TB) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	kubeAPI.once.Do(func() {
		root := repoRoot()
		for v, bin := range map[string]string{"TEST_ASSET_KUBE_APISERVER": "kube-apiserver", "TEST_ASSET_ETCD": "etcd"} {
			if os.Getenv(v) == "" {
				os.Setenv(v, filepath.Join(root, "bin", bin))
			}
			if _, err := os.Stat(os.Getenv(v)); err != nil {
				kubeAPI.err = fmt.Errorf("%s: %v (make deps builds it)", v, err)
				return
			}
		}
		ctrllog.SetLogger(logr.Discard()) // envtest's own lines say nothing a history needs
		env := &envtest.Environment{}
		// Node mode's nodePort is the pods' port, a free one anywhere.
		api := env.ControlPlane.GetAPIServer().Configure()
		api.Set("service-node-port-range", "1024-65535")
		// The namespace has no default route to pick an address from.
		api.Set("advertise-address", "127.0.0.1")
		// EndpointSlices and Nodes are watched from etcd itself, not the
		// watch cache: a watch resumed from a version etcd compacted away
		// is answered 410 (KubeUp compacts), and the service lists again.
		api.Set("watch-cache-sizes", "endpointslices.discovery.k8s.io#0,nodes#0")
		cfg, err := env.Start()
		if err != nil {
			kubeAPI.err = fmt.Errorf("start kube-apiserver: %w", err)
			return
		}
		kubeAPI.env, kubeAPI.cfg = env, cfg
		kubeAPI.client, kubeAPI.err = kubernetes.NewForConfig(cfg)
	})
	if kubeAPI.err != nil {
		t.Fatal(kubeAPI.err)
	}
	return kubeAPI.cfg, kubeAPI.client
}

// compactEtcd compacts the API server's etcd to its newest revision
// (through etcd's JSON gateway): a watch resumed from any older version is
// then answered 410 Gone, as one resumed after a long outage is in a busy
// cluster (the API server compacts every 5 minutes).
func compactEtcd(ctx context.Context) error {
	if kubeAPI.env == nil || kubeAPI.env.ControlPlane.Etcd == nil || kubeAPI.env.ControlPlane.Etcd.URL == nil {
		return errors.New("compact etcd: no etcd")
	}
	base := kubeAPI.env.ControlPlane.Etcd.URL.String()
	post := func(path, body string, out any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
		}
		return json.Unmarshal(b, out)
	}
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := post("/v3/kv/range", `{"key":"AA=="}`, &rng); err != nil {
		return fmt.Errorf("compact etcd: read its revision: %w", err)
	}
	if rng.Header.Revision == "" {
		return errors.New("compact etcd: no revision in its answer")
	}
	var done struct{}
	if err := post("/v3/kv/compaction", `{"revision":"`+rng.Header.Revision+`","physical":true}`, &done); err != nil {
		return fmt.Errorf("compact etcd at %s: %w", rng.Header.Revision, err)
	}
	return nil
}

// stopKube stops the API server if a history started it (TestMain).
func stopKube() {
	if kubeAPI.env != nil {
		_ = kubeAPI.env.Stop()
	}
}

// kubeconfigFile writes a kubeconfig for the API server, reached at
// hostport (its certificate is for 127.0.0.1, whatever the port), into dir.
func kubeconfigFile(t testing.TB, cfg *rest.Config, hostport, dir string) string {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["hist"] = &clientcmdapi.Cluster{Server: "https://" + hostport, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["hist"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["hist"] = &clientcmdapi.Context{Cluster: "hist", AuthInfo: "hist"}
	c.CurrentContext = "hist"
	p := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*c, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeMirror writes a desired.Input into the API server: each object
// created, updated where it changed, deleted once gone, additions before
// deletions (an endpoint that moves to another slice is briefly in both,
// never in neither).
type kubeMirror struct {
	c      kubernetes.Interface
	svcs   map[string]*corev1.Service            // as last written, by name
	slices map[string]*discoveryv1.EndpointSlice // as last written
	nodes  map[string]*corev1.Node
}

// newKubeMirror empties the history's namespace and the Nodes (a history
// before this one left its own) and returns a mirror writing into them.
func newKubeMirror(t testing.TB, c kubernetes.Interface) *kubeMirror {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	m := &kubeMirror{c: c, slices: map[string]*discoveryv1.EndpointSlice{}, nodes: map[string]*corev1.Node{}}
	m.clear(t)
	t.Cleanup(func() { m.clear(t) })
	return m
}

func (m *kubeMirror) clear(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := metav1.ListOptions{}
	errs := []error{
		m.c.DiscoveryV1().EndpointSlices(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all),
		m.c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, all),
		m.c.CoreV1().Events(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all),
	}
	// Services have no collection delete.
	svcs, err := m.c.CoreV1().Services(namespace).List(ctx, all)
	errs = append(errs, err)
	if err == nil {
		for _, s := range svcs.Items {
			errs = append(errs, m.c.CoreV1().Services(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("empty the API server: %v", err)
	}
}

// set writes in: the Services (web's, and in many-Services histories
// web2's and web3's while it exists), the Nodes, then the slices.
func (m *kubeMirror) set(ctx context.Context, in kubeState) error {
	if err := m.setServices(ctx, in.services); err != nil {
		return err
	}
	if err := m.setNodes(ctx, in.nodes); err != nil {
		return err
	}
	return m.setSlices(ctx, in.slices)
}

// kubeState is what the history's Kubernetes holds.
type kubeState struct {
	services []*corev1.Service
	nodes    []corev1.Node
	slices   []discoveryv1.EndpointSlice
}

// stateOf is in as a kubeState: one Service.
func stateOf(in desired.Input) kubeState {
	st := kubeState{nodes: in.Nodes, slices: in.Slices}
	if in.Service != nil {
		st.services = []*corev1.Service{in.Service}
	}
	return st
}

// setServices creates each Service of want not written yet, updates one
// whose annotations changed (a Service that names a backend, or no more),
// and deletes those want holds no more.
func (m *kubeMirror) setServices(ctx context.Context, want []*corev1.Service) error {
	api := m.c.CoreV1().Services(namespace)
	if m.svcs == nil {
		m.svcs = map[string]*corev1.Service{}
	}
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.Name] = true
		old := m.svcs[w.Name]
		if old == nil {
			svc := w.DeepCopy()
			svc.UID = ""
			got, err := api.Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Service %s: %w", w.Name, err)
			}
			m.svcs[w.Name] = got
			continue
		}
		if !reflect.DeepEqual(old.Annotations, w.Annotations) {
			up := old.DeepCopy()
			up.Annotations = w.Annotations
			got, err := api.Update(ctx, up, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update Service %s: %w", w.Name, err)
			}
			m.svcs[w.Name] = got
		}
	}
	for name := range m.svcs {
		if !seen[name] {
			if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete Service %s: %w", name, err)
			}
			delete(m.svcs, name)
		}
	}
	return nil
}

func (m *kubeMirror) setNodes(ctx context.Context, nodes []corev1.Node) error {
	api := m.c.CoreV1().Nodes()
	seen := map[string]bool{}
	for i := range nodes {
		want := nodes[i].DeepCopy()
		seen[want.Name] = true
		old := m.nodes[want.Name]
		if old == nil {
			// A Node's status is its kubelet's, written with it on create.
			got, err := api.Create(ctx, want, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Node %s: %w", want.Name, err)
			}
			m.nodes[want.Name] = got
			continue
		}
		cur := old
		if !reflect.DeepEqual(old.Spec, want.Spec) || !reflect.DeepEqual(old.Labels, want.Labels) || !reflect.DeepEqual(old.Annotations, want.Annotations) {
			up := old.DeepCopy()
			up.Spec, up.Labels, up.Annotations = want.Spec, want.Labels, want.Annotations
			got, err := api.Update(ctx, up, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update Node %s: %w", want.Name, err)
			}
			cur = got
		}
		if !sameConditions(cur.Status.Conditions, want.Status.Conditions) {
			up := cur.DeepCopy()
			up.Status = want.Status
			got, err := api.UpdateStatus(ctx, up, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update Node %s status: %w", want.Name, err)
			}
			cur = got
		}
		m.nodes[want.Name] = cur
	}
	for name := range m.nodes {
		if !seen[name] {
			if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete Node %s: %w", name, err)
			}
			delete(m.nodes, name)
		}
	}
	return nil
}

func sameConditions(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status {
			return false
		}
	}
	return true
}

func (m *kubeMirror) setSlices(ctx context.Context, slices []discoveryv1.EndpointSlice) error {
	api := m.c.DiscoveryV1().EndpointSlices(namespace)
	seen := map[string]bool{}
	for i := range slices {
		want := slices[i].DeepCopy()
		seen[want.Name] = true
		old := m.slices[want.Name]
		switch {
		case old == nil:
			got, err := api.Create(ctx, want, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create EndpointSlice %s: %w", want.Name, err)
			}
			m.slices[want.Name] = got
		case !reflect.DeepEqual(old.Endpoints, want.Endpoints) || !reflect.DeepEqual(old.Ports, want.Ports):
			up := old.DeepCopy()
			up.Endpoints, up.Ports = want.Endpoints, want.Ports
			got, err := api.Update(ctx, up, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update EndpointSlice %s: %w", want.Name, err)
			}
			m.slices[want.Name] = got
		}
	}
	for name := range m.slices {
		if !seen[name] {
			if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete EndpointSlice %s: %w", name, err)
			}
			delete(m.slices, name)
		}
	}
	return nil
}

// kubeProxy stands between serve and the API server, as the network
// does: it can cut every connection (watches end mid-stream) and refuse
// new ones for a while (the API unreachable from the service, while
// Kubernetes itself goes on).
type kubeProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	refusing bool
}

func startKubeProxy(t testing.TB, upstream string) *kubeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &kubeProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *kubeProxy) addr() string { return p.ln.Addr().String() }

func (p *kubeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refusing := p.refusing
		p.mu.Unlock()
		if refusing {
			_ = c.(*net.TCPConn).SetLinger(0) // a reset, as an unreachable API's
			c.Close()
			continue
		}
		go p.relay(c)
	}
}

func (p *kubeProxy) relay(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go cp(up, c)
	go cp(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track keeps c and up to cut them; false (both closed) when refusing.
func (p *kubeProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusing {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// cut closes every connection: watches and requests under way fail.
func (p *kubeProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// refuse cuts every connection and refuses new ones (on), or takes them
// again.
func (p *kubeProxy) refuse(on bool) {
	p.mu.Lock()
	p.refusing = on
	p.mu.Unlock()
	if on {
		p.cut()
	}
}

// hostPort is a rest.Config's host as host:port.
func hostPort(host string) string {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		return u.Host
	}
	return host
}
