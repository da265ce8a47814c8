// Package sync is the parent of the packages that make one reconcile; it holds
// no code of its own.
//
// The folder is named after what the service does, which shadows the standard
// library's sync. Rather than alias imports everywhere, every package below it
// has its own name, so the standard library's sync is always "sync" and ours is
// never imported as such:
//
//	model       the shared vocabulary: Server, Backend, State (a leaf)
//	failure     the classes of failure: temporary, unreachable, permanent (a leaf)
//	cut         bounds text taken from outside before it is quoted (a leaf)
//	config      the one Config, read from the environment
//	desired     Kubernetes objects -> desired backends (pure)
//	plan        current vs desired -> changes (pure)
//	kube        reads Service, EndpointSlices and Nodes (I/O)
//	dataplane   HAProxy Data Plane API v3 driver (I/O)
//	runtimeapi  HAProxy runtime API driver, and the socket that gates checks (I/O)
//	reloads     notices HAProxy reloads the service did not cause, and pokes
//	watch       watches the Service's objects and pokes reconciles
//	metrics     Prometheus counters around the reconciler, source and drivers
//	reconcile   wires one reconcile: read, plan, apply with retry
//	dataplanetest  a spec-validating Data Plane API server for tests
//	haproxytest    private HAProxy processes and counting listeners for tests
//	history     the history checker: random histories, invariants checked from outside
//	desired/desiredtest, kube/kubetest  Kubernetes inputs and clients for tests
//	e2e         end-to-end tests and benchmarks: real kube-apiserver, real HAProxy
package sync
