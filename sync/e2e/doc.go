// Package e2e holds the end-to-end tests: the HTTP handler over the real
// reconciler, a real kube-apiserver (envtest, built by hack/) and real HAProxy
// processes, with convergence proven by traffic through HAProxy's frontends.
//
// The tests run in a private network namespace (the test binary re-executes
// itself with CLONE_NEWNET, as root), so pod addresses such as 10.244.0.1,
// which the API server requires outside 127.0.0.0/8, are the test's own hosts
// and no packet leaves the machine.
package e2e
