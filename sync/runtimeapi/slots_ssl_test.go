package runtimeapi_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// TestSlotsServeWithDefaultServerSSL: a backend whose haproxy.cfg says
// "default-server ssl verify none" (pods that speak TLS alone) serves
// through every filled slot, checks included (issue 55's "default-server
// ssl served"); a server added beyond the slots with "add server" gets no
// TLS: its plain check passes (a bare connect) and its clients fail, which
// is what the result's overflow and its warning say.
func TestSlotsServeWithDefaultServerSSL(t *testing.T) {
	h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "be", Lines: []string{
		"balance roundrobin", "load-server-state-from-file global",
		"default-server ssl verify none inter 200ms rise 1 fall 1",
		"server-template k8s 1-2 k8s.invalid:1 check init-addr last,0.0.0.0"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin"}, chk)
	if err != nil {
		t.Fatal(err)
	}
	cert := selfSigned(t)
	var eps []model.Server
	for i, port := range haproxytest.FreePorts(t, "127.0.0.1", 3) {
		name := fmt.Sprintf("node-%d", i)
		listenTLS(t, name, fmt.Sprintf("127.0.0.1:%d", port), cert)
		eps = append(eps, srv(name, "127.0.0.1", port, model.Ready))
	}
	if use := convergeSlots(t, c, want(eps[:2]...)); use.Filled != 2 || len(use.Overflow) != 0 {
		t.Fatalf("slot use %+v: want both endpoints in the slots", use)
	}
	for _, name := range []string{"k8s1", "k8s2"} {
		if got := h.Servers(t, "be")[name]; !got.Up() || got.Maint() || got.Drain() {
			t.Errorf("%s not in service over TLS: %+v", name, got)
		}
	}
	got := haproxytest.Spread(h.Frontends["be"], 30)
	if got["node-0"] == 0 || got["node-1"] == 0 || got[""] != 0 {
		t.Errorf("30 connections through the frontend: %v; want both slots' pods, none failed", got)
	}
	t.Logf("in the slots, 30 connections: %v", got)

	if use := convergeSlots(t, c, want(eps...)); len(use.Overflow) != 1 || use.Overflow[0] != "node-2" {
		t.Fatalf("slot use %+v: want node-2 beyond the slots", use)
	}
	got = haproxytest.Spread(h.Frontends["be"], 30)
	if got["node-2"] != 0 || got[""] == 0 {
		t.Errorf("with node-2 added bare, 30 connections: %v; want its share failed", got)
	}
	t.Logf("node-2 added bare beyond the slots, 30 connections: %v", got)
}

// listenTLS answers name to every TLS connection at addr.
func listenTLS(t *testing.T, name, addr string, cert tls.Certificate) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// Short: a clear connection waits for a hello that never comes.
				_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					_, _ = io.WriteString(tc, name+"\n")
				}
			}()
		}
	}()
}

// selfSigned is a certificate for 127.0.0.1, signed by itself.
func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pod"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
