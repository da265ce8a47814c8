package kube

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestNotReadyPods: the pods read for the readiness gate are those whose
// endpoint does not say the pod is Ready — with publishNotReadyAddresses
// every endpoint is ready, and only serving tells — coming pods first.
func TestNotReadyPods(t *testing.T) {
	yes, no := true, false
	ep := func(pod string, ready, serving, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod},
			Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
	}
	tests := []struct {
		name string
		eps  []discoveryv1.Endpoint
		want []string
	}{
		{"ready pods are not read", []discoveryv1.Endpoint{ep("a", &yes, &yes, &no), ep("b", nil, nil, nil)}, []string{}},
		{"not ready is read", []discoveryv1.Endpoint{ep("a", &no, &no, &no)}, []string{"a"}},
		{"publishNotReadyAddresses: ready but not serving is read", []discoveryv1.Endpoint{ep("gated", &yes, &no, &no), ep("in", &yes, &yes, &no)}, []string{"gated"}},
		{"publishNotReadyAddresses: terminating is read", []discoveryv1.Endpoint{ep("old", &yes, &yes, &yes)}, []string{"old"}},
		{"coming pods before terminating ones", []discoveryv1.Endpoint{ep("a-old", &no, &yes, &yes), ep("z-new", &no, &no, &no), ep("b-old", &no, &no, &yes), ep("m-new", &no, nil, nil)},
			[]string{"m-new", "z-new", "a-old", "b-old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := notReadyPods([]discoveryv1.EndpointSlice{{Endpoints: tt.eps}}, "ns")
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
