package e2e

import (
	"net/http"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// TestKubernetesAuth runs the real service with WEBHOOK_AUTH=kubernetes
// against the real API server: tokens from the TokenRequest API are verified
// with TokenReview for the audience and the allowed ServiceAccounts.
func TestKubernetesAuth(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	w.slice("web-1", "web", map[string]int32{"http": 8080})
	for _, sa := range []string{"cron", "other"} {
		if _, err := cluster.client.CoreV1().ServiceAccounts(w.ns).Create(w.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(sa, audience string) string {
		t.Helper()
		exp := int64(600)
		tr, err := cluster.client.CoreV1().ServiceAccounts(w.ns).CreateToken(w.ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	s := startService(t,
		"KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "TARGET_ADDRESS=pod", "WATCH=false",
		"WEBHOOK_AUTH=kubernetes", "WEBHOOK_AUDIENCE=haproxy-k8s-sync", "WEBHOOK_ALLOWED_SERVICEACCOUNTS="+w.ns+"/cron")
	s.wait(t, "/readyz", 10*time.Second)
	post := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.base+"/reconcile", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"the allowed ServiceAccount, right audience": {token("cron", "haproxy-k8s-sync"), http.StatusOK},
		"the allowed ServiceAccount, wrong audience": {token("cron", "https://kubernetes.default.svc"), http.StatusUnauthorized},
		"another ServiceAccount":                     {token("other", "haproxy-k8s-sync"), http.StatusForbidden},
		"garbage":                                    {"not-a-jwt-0123456789", http.StatusUnauthorized},
		"no token":                                   {"", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			if got := post(c.token); got != c.want {
				t.Errorf("%d, want %d", got, c.want)
			}
		})
	}
	if n := s.metric(t, "haproxy_k8s_sync_auth_failures_total", `reason="forbidden"`); n != 1 {
		t.Errorf("forbidden counted %v times", n)
	}
	if n := s.metric(t, "haproxy_k8s_sync_auth_failures_total"); n != 4 {
		t.Errorf("%v auth failures counted, want 4", n)
	}
}
