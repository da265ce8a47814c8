package config

import (
	"strings"
	"testing"
)

func TestManyServicesDefaultIsName(t *testing.T) {
	env(t, map[string]string{"HAPROXY_DATAPLANE_URL": "http://127.0.0.1:5555"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.ManyServices() || c.Selection != SelectName {
		t.Fatalf("default selection = %q (many %v), want name", c.Selection, c.ManyServices())
	}
}

func TestManyServicesLoads(t *testing.T) {
	env(t, map[string]string{
		"HAPROXY_DATAPLANE_URL": "http://127.0.0.1:5555,http://127.0.0.2:5555",
		"SERVICE_SELECTION":     "annotation, class", "WATCH_NAMESPACES": "apps,web",
		"ANNOTATION_BACKENDS": "be_apps_*, be_web", "HAPROXY_VIP": "127.0.0.10,127.0.0.11",
		"HAPROXY_VIP_HOSTNAME": "lb.example.com", "CLUSTER_NAME": "eu1", "SERVICE_EVENTS": "true",
	})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	s := c.Selecting()
	if !s.Annotation || !s.Class || s.ClassName != "haproxy-k8s-sync.io/haproxy" || s.Cluster != "eu1" ||
		strings.Join(s.Namespaces, ",") != "apps,web" || strings.Join(s.AllowedBackends, ",") != "be_apps_*,be_web" {
		t.Fatalf("selection = %+v", s)
	}
	if len(c.VIPs) != 2 || c.VIPs[1].String() != "127.0.0.11" {
		t.Fatalf("VIPs = %v", c.VIPs)
	}
	if !c.ServiceEvents {
		t.Fatal("SERVICE_EVENTS: each followed Service's Events are written in many-Services mode too")
	}
}

func TestManyServicesRejects(t *testing.T) {
	dp := "http://127.0.0.1:5555"
	tests := []struct {
		env  map[string]string
		want string // the error starts with the variable at fault
	}{
		{map[string]string{"SERVICE_SELECTION": "labels"}, "SERVICE_SELECTION: "},
		{map[string]string{"SERVICE_SELECTION": "name,class"}, "SERVICE_SELECTION: "},
		{map[string]string{"SERVICE_SELECTION": "annotation"}, "ANNOTATION_BACKENDS: required"},
		{map[string]string{"SERVICE_SELECTION": "annotation", "ANNOTATION_BACKENDS": "be_[x"}, "ANNOTATION_BACKENDS: "},
		{map[string]string{"SERVICE_SELECTION": "class"}, "HAPROXY_VIP: required"},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "lb.example.com"}, "HAPROXY_VIP: "},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "0.0.0.0"}, "HAPROXY_VIP: "},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "127.0.0.1,127.0.0.2"}, "HAPROXY_VIP: 2 addresses for 1 HAProxy targets"},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "127.0.0.1", "HAPROXY_VIP_HOSTNAME": "not a name"}, "HAPROXY_VIP_HOSTNAME: "},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "127.0.0.1", "LOAD_BALANCER_CLASS": ""}, "LOAD_BALANCER_CLASS: "},
		{map[string]string{"SERVICE_SELECTION": "class", "HAPROXY_VIP": "127.0.0.1", "HAPROXY_DATAPLANE_URL": "", "HAPROXY_RUNTIME_URL": "unix:///run/haproxy.sock"}, "HAPROXY_DATAPLANE_URL: required with class"},
		{map[string]string{"SERVICE_SELECTION": "annotation", "ANNOTATION_BACKENDS": "be_*", "HAPROXY_BACKENDS": "http=be_http"}, "HAPROXY_BACKENDS: not used"},
		{map[string]string{"SERVICE_SELECTION": "annotation", "ANNOTATION_BACKENDS": "be_*", "HAPROXY_VIP": "127.0.0.1"}, "HAPROXY_VIP: only used with class"},
		{map[string]string{"SERVICE_SELECTION": "annotation", "ANNOTATION_BACKENDS": "be_*", "WATCH_NAMESPACES": "Apps"}, "WATCH_NAMESPACES: "},
		{map[string]string{"ANNOTATION_BACKENDS": "be_*"}, "ANNOTATION_BACKENDS: only used with SERVICE_SELECTION"},
		{map[string]string{"HAPROXY_VIP": "127.0.0.1"}, "HAPROXY_VIP: only used with SERVICE_SELECTION"},
	}
	for _, tt := range tests {
		kv := map[string]string{"HAPROXY_DATAPLANE_URL": dp}
		for k, v := range tt.env {
			kv[k] = v
		}
		env(t, kv)
		_, err := Load()
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want it to start %q", tt.env, err, tt.want)
		}
	}
}

func TestManyServicesString(t *testing.T) {
	env(t, map[string]string{"HAPROXY_RUNTIME_URL": "unix:///run/haproxy.sock", "SERVICE_SELECTION": "annotation", "ANNOTATION_BACKENDS": "be_*", "WATCH_NAMESPACES": "apps"})
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "selection=annotation namespaces=apps annotationBackends=be_* target=node dataplanes=0 runtime=1"; got != want {
		t.Fatalf("String() = %q, want %q (no single Service named)", got, want)
	}
}
