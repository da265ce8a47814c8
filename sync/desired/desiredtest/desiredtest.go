// Package desiredtest builds Kubernetes inputs for tests of the packages that
// consume desired state, without an API server.
package desiredtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// RealisticNode is a Node shaped like one of a real cloud cluster, about
// 12 KB of JSON: the usual labels and annotations, five conditions, a taint,
// capacity, node info and 40 container images. Its identifiers (machine, boot,
// instance) are drawn from its name and its images from a pool of 120 with
// their own digests, so that Nodes differ as much as real ones do and a
// compressed list of them is not smaller than a real one would be.
func RealisticNode(name, internalIP string) *corev1.Node {
	id := hexOf(name)
	uuid := id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32]
	beat := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, LastHeartbeatTime: beat, LastTransitionTime: beat, Reason: reason,
			Message: "kubelet reports " + reason + " for this node and has done so since it started"}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, ResourceVersion: "1",
			Labels: map[string]string{
				"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				"node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/region": "eu-west-1",
				"topology.kubernetes.io/zone": "a", "node-role.kubernetes.io/worker": "",
				"cloud.example.com/nodepool": "general-purpose-pool-7", "cloud.example.com/image": "ubuntu-2404-v20261101",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-` + id[:17] + `","efs.csi.aws.com":"i-` + id[:17] + `"}`,
				"projectcalico.org/IPv4Address":                          internalIP + "/20",
				"projectcalico.org/IPv4IPIPTunnelAddr":                   "192.168.77.1",
				"cluster.x-k8s.io/owner-name":                            "general-purpose-pool-7-5d8f9c7b6-" + name,
			},
		},
		Spec: corev1.NodeSpec{
			PodCIDR: "10.200.0.0/24", PodCIDRs: []string{"10.200.0.0/24"},
			ProviderID: "aws:///eu-west-1a/i-" + id[:17],
			Taints:     []corev1.Taint{{Key: "dedicated", Value: "ingress", Effect: corev1.TaintEffectPreferNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("7910m"), corev1.ResourceMemory: resource.MustParse("31Gi"),
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("95Gi"),
			},
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "CalicoIsUp"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: internalIP},
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeInternalDNS, Address: name + ".eu-west-1.compute.internal"},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: id[32:64], SystemUUID: uuid,
				BootID: hexOf("boot " + name)[:36], KernelVersion: "6.8.0-1019-aws",
				OSImage: "Ubuntu 24.04.1 LTS", ContainerRuntimeVersion: "containerd://1.7.22",
				KubeletVersion: "v1.34.1", OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
	first := int(id[0]) // one of 16 runs through the pool, by name
	for i := range 40 {
		k := (first + i*3) % 120
		img := fmt.Sprintf("registry.example.com/platform/team-%02d/service-%03d", k%7, k)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{
				img + "@sha256:" + hexOf(img),
				img + ":v1." + strconv.Itoa(k) + ".0",
			},
			SizeBytes: int64(50_000_000 + k*1_000_000),
		})
	}
	return n
}

// hexOf is a stable, random-looking 64-digit hex string for s (a digest).
func hexOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
