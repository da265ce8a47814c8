// Package services decides which Services this instance follows in
// many-Services mode (SERVICE_SELECTION annotation and/or class) and which
// backends each one maps to. The single-Service mode (SERVICE_SELECTION=name)
// does not use it.
package services

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// Selected is one Service this instance follows in many-Services mode.
type Selected struct {
	Namespace, Name string
	// Class says it was selected by spec.loadBalancerClass: its frontends
	// and backends are created by this instance (package lb), named by
	// ClassNames.
	Class bool
	// Ports map the Service's ports to backends, sorted by Port.
	Ports []Port
}

// Port maps one Service port to the backend that serves it.
type Port struct {
	Name    string // the Service port's name ("" for an unnamed only port)
	Port    int32  // the Service port: what a class frontend binds
	Backend string
}

// Key is "namespace/name", how results, logs and ?service= name a Service.
func (s Selected) Key() string { return s.Namespace + "/" + s.Name }

// ClassPrefix starts the name of every frontend and backend this instance
// creates for a class-selected Service; with the mark written in their
// description, it is how ownership is read back from HAProxy.
const ClassPrefix = "k8s_"

// ClassNames are the frontend and backend a class-selected Service's port
// gets: fe_k8s_[cluster_]namespace_name_port and be_k8s_…. Namespace and
// Service names are DNS labels (no "_"), so "_" separates them without
// ambiguity; a CLUSTER_NAME is a DNS label too.
func ClassNames(cluster, namespace, name string, port int32) (frontend, backend string) {
	parts := []string{namespace, name, strconv.Itoa(int(port))}
	if cluster != "" {
		parts = append([]string{cluster}, parts...)
	}
	base := ClassPrefix + strings.Join(parts, "_")
	return "fe_" + base, "be_" + base
}

// FrontendReport is what one pass over the class-selected Services'
// frontends did (package lb makes it; the many-Services reconcile reports it).
type FrontendReport struct {
	// Created and Removed name the frontends created and removed this pass.
	Created []string `json:"created,omitempty"`
	Removed []string `json:"removed,omitempty"`
	// Draining names the owned backends no selected Service wants any more:
	// they are reconciled as zero endpoints (parked, guarded) until drained,
	// then removed with their frontend on a later pass.
	Draining []string `json:"draining,omitempty"`
	// Ready holds, per Service key, whether its frontends exist on every
	// target (the first condition for writing its status).
	Ready map[string]bool `json:"-"`
	// Failed holds, per Service key, why its frontends could not be made.
	Failed map[string]string `json:"failed,omitempty"`
	// FailedClass holds the class of each Failed: Permanent for what the
	// Service asks that cannot be made (an operator's frontend binds its
	// port), the write's class for a write HAProxy refused or did not
	// answer. A Failed without one is Permanent.
	FailedClass map[string]failure.Class `json:"-"`
	// Loading names the Services (keys) whose frontends and backends are
	// configured but not yet run by HAProxy on some target (written this
	// pass, or a reload is pending): their servers wait for the reload,
	// since HAProxy's socket knows no backend before it.
	Loading []string `json:"loading,omitempty"`
	// Behind names the targets this pass left behind (no answer a
	// straggle after another answered, or still busy with an earlier
	// pass): the rest of the reconcile does not wait for them again.
	Behind []string `json:"behind,omitempty"`
}

// ClassesOf returns the spec.loadBalancerClass of every LoadBalancer
// Service of svcs that has one, by key: what tells package lb whose a
// section marked before marks carried the class is.
func ClassesOf(svcs []corev1.Service) map[string]string {
	out := map[string]string{}
	for i := range svcs {
		s := &svcs[i]
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass != "" {
			out[key(s)] = *s.Spec.LoadBalancerClass
		}
	}
	return out
}
