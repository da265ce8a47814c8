// Package desiredtest builds Kubernetes inputs for tests of the packages that
// consume desired state, without an API server.
package desiredtest

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// Source is a Kubernetes read that returns In, or Err when set.
type Source struct {
	In  desired.Input
	Err error
}

// Read returns the fixed input or error.
func (s *Source) Read(context.Context) (desired.Input, error) { return s.In, s.Err }

// PodCluster is Service namespace/service with one port "http" (80 -> 8080)
// and one EndpointSlice holding a ready endpoint per IP (no Pod, no Node).
func PodCluster(namespace, service string, ips ...string) desired.Input {
	name, port, yes := "http", int32(8080), true
	sl := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: service + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
	}
	return desired.Input{
		Service: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		},
		Slices: []discoveryv1.EndpointSlice{sl},
	}
}

// Live is a Source whose answer can change while reconciles run; safe for
// concurrent use.
type Live struct {
	mu  sync.Mutex
	in  desired.Input
	err error
}

// NewLive returns a Live source answering in.
func NewLive(in desired.Input) *Live { return &Live{in: in} }

// Set changes the answer of later reads.
func (l *Live) Set(in desired.Input) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.in, l.err = in, nil
}

// SetErr makes later reads fail with err.
func (l *Live) SetErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// Read returns the current answer.
func (l *Live) Read(context.Context) (desired.Input, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.in, l.err
}

// Terminating returns in with the endpoints at ips serving and terminating
// (their servers drain). The slices are copied; in is not changed.
func Terminating(in desired.Input, ips ...string) desired.Input {
	yes, no := true, false
	slices := make([]discoveryv1.EndpointSlice, len(in.Slices))
	for i, sl := range in.Slices {
		sl.Endpoints = append([]discoveryv1.Endpoint(nil), sl.Endpoints...)
		for j := range sl.Endpoints {
			for _, ip := range ips {
				if len(sl.Endpoints[j].Addresses) > 0 && sl.Endpoints[j].Addresses[0] == ip {
					sl.Endpoints[j].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
				}
			}
		}
		slices[i] = sl
	}
	in.Slices = slices
	return in
}
