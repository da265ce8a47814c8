# haproxy-k8s-sync — build and test targets. `make test` is what CI runs.
GO      ?= go
# The release is one fact, the VERSION file; the commit is git's.
VERSION := $(shell cat VERSION)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Every timestamp of the image: the commit's time, so a rebuild is identical.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: all build image deb release lint-workflows demo test deps matrix vet fmt-check unit history soak soak-run replay bench fuzz clean record-dataplaneapi

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/haproxy-k8s-sync ./cmd/haproxy-k8s-sync

## image: the container image without a Docker daemon, bin/image.tar (an OCI
## image layout and a docker save archive in one tar; crane push, skopeo
## copy, docker load), and its SPDX SBOM bin/image.spdx.json. The base is
## Debian's ca-certificates package (apt-get download) and a non-root user.
## unit checks it (hack/image).
image: build
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/image -binary bin/haproxy-k8s-sync \
	  -version $(VERSION) -commit $(COMMIT) -out bin/image.tar -sbom bin/image.spdx.json

## deb: the Debian package for the HAProxy host (systemd unit, environment
## file, its own user in group haproxy), bin/haproxy-k8s-sync_$(VERSION)_amd64.deb,
## built with nfpm: no dpkg tooling. unit checks it (hack/deb).
deb: build
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/deb -arch amd64 -binary bin/haproxy-k8s-sync \
	  -version $(VERSION) -out bin

## release: every file of a release into RELEASE_DIR (bin/release), without
## Docker, every timestamp the commit's (the same commit gives the same
## bytes): static binaries for linux/amd64 and linux/arm64; the image index of
## both, an OCI image layout in a tar, with each image's SPDX SBOM and SLSA
## provenance; the chart packaged by helm with its index.yaml; the .deb
## packages (hack/deb); SHA256SUMS over them all. hack/release checks them;
## the release workflow publishes them (docs/install.md, Release artefacts).
RELEASE_DIR ?= bin/release
RELEASE_ARCHES := amd64 arm64
HELM ?= $(CURDIR)/bin/helm
# What the provenance names: where the index is published, who built it.
IMAGE_REPOSITORY ?= ghcr.io/haproxy-k8s-sync/haproxy-k8s-sync
BUILDER_ID ?= urn:haproxy-k8s-sync:builder:local-make-release
INVOCATION_ID ?=
# The commit is stamped by LDFLAGS; -buildvcs=false and the default
# GOAMD64/GOARM64 keep the binaries' bytes independent of .git and of the
# environment.
release:
	@[ -n "$(RELEASE_DIR)" ] && [ "$(RELEASE_DIR)" != / ] || { echo "release: RELEASE_DIR must name a directory of its own"; exit 2; }
	./hack/build-kube-tools.sh helm
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	for arch in $(RELEASE_ARCHES); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch GOAMD64=v1 GOARM64=v8.0 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' \
	    -o $(RELEASE_DIR)/haproxy-k8s-sync_$(VERSION)_linux_$$arch ./cmd/haproxy-k8s-sync || exit 1; \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/image -release $(RELEASE_DIR) -version $(VERSION) -commit $(COMMIT) \
	  -repository '$(IMAGE_REPOSITORY)' -builder-id '$(BUILDER_ID)' -invocation-id '$(INVOCATION_ID)' \
	  $(foreach a,$(RELEASE_ARCHES),$(RELEASE_DIR)/haproxy-k8s-sync_$(VERSION)_linux_$(a))
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/release chart -helm $(HELM) -out $(RELEASE_DIR) deploy/helm/haproxy-k8s-sync
	@if [ -d hack/deb ]; then \
	  for arch in $(RELEASE_ARCHES); do \
	    echo "$(GO) run ./hack/deb -arch $$arch ..."; \
	    SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/deb -arch $$arch -binary $(RELEASE_DIR)/haproxy-k8s-sync_$(VERSION)_linux_$$arch \
	      -version $(VERSION) -out $(RELEASE_DIR) || exit 1; \
	  done; \
	else echo "release: no hack/deb in this tree: the .deb packages are skipped"; fi
	$(GO) run ./hack/release sums $(RELEASE_DIR)

## lint-workflows: actionlint (a Go tool of go.mod) on .github/workflows.
lint-workflows:
	$(GO) tool actionlint -color=false

## demo: a local HAProxy synced from testdata/demo/ (no cluster needed): one Service, then many.
demo: build
	./hack/demo.sh

## test: everything CI checks, from a fresh machine with only Go installed:
## installs HAProxy and etcd (apt) and builds kube-apiserver and HAProxy 3.0
## when missing; builds the image and the release, which unit checks; lints
## the workflows.
test: deps fmt-check vet lint-workflows image release unit history matrix fuzz

## deps: HAProxy, etcd, iproute2 from Debian; kube-apiserver, kubectl, helm
## and HAProxy 3.0 LTS built into bin/ (cached in ~/.cache/haproxy-k8s-sync).
deps:
	./hack/install-deps.sh
	./hack/build-haproxy.sh

## matrix: the tests that drive a real HAProxy again, on HAProxy 3.0 LTS
## (unit runs them on Debian's 2.6), with both drivers. Any other binary:
## make matrix HAPROXY=/path/to/haproxy (build one from a source tree with
## hack/build-haproxy.sh /path/to/tree).
# The histories run here without -race (make history runs them with it on
# 2.6): what this pass is for is 3.0's behaviour, and the race build's
# load on 2 cores only blurs the clients' timing and lengthens CI. The
# fixed histories are split in two parts (HKS_HISTORY_PART, history_test.go):
# part b here, part a in make history; PART= runs both.
HAPROXY ?= $(CURDIR)/bin/haproxy-3.0
PART ?= b
matrix:
	@HKS_HAPROXY=$(HAPROXY) $(GO) test -race -count=1 -timeout 25m ./sync/runtimeapi ./sync/dataplanetest ./sync/e2e & pid=$$!; \
	HKS_HISTORY_PART=$(PART) HKS_HAPROXY=$(HAPROXY) $(GO) test -count=1 -timeout 25m ./sync/history; rc=$$?; \
	wait $$pid || rc=1; exit $$rc

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Every test with -race, and every benchmark once (so they keep compiling and
# passing their own checks) in the same build, the longest ones on fewer
# steps or Services (the figures are make bench's): serve's memory at 500
# Services from manifests, 50 against the API server, the fleet's reconcile
# at 10 and 50 (under -race beside the other packages, 2,000 Services'
# follow-ups held a full reconcile past its 62 s wait: CI at 4bdab19, 503;
# 0.8.18 answers those waiting with the full reconcile, not run again at
# 2,000 under -race). The e2e tests re-execute themselves in a private
# network namespace (root).
unit:
	HKS_BENCH_ROLLOUT_STEPS=1 HKS_BENCH_GATE_STEPS=10 HKS_BENCH_RSS_SERVICES=500 HKS_BENCH_SERVICES=10,50 $(GO) test -race -count=1 -timeout 25m -bench . -benchtime 1x $$($(GO) list ./... | grep -v /sync/history)

## history: the history checker's short fixed budget (a few minutes: part a
## of the fixed histories, make matrix runs part b on 3.0) on Debian's
## HAProxy, alone: its invariants time what clients see, so it runs beside
## no other test package.
history:
	HKS_HISTORY_PART=a $(GO) test -race -count=1 -timeout 15m ./sync/history

## soak: the history checker for SOAK (a duration) on HAPROXY, both drivers,
## random seeds; ends with "histories: N histories, S steps, R requests, V
## violations". A failed history prints its seed and how to replay it; its
## service log (debug, JSON) is kept in bin/soak-logs/.
SOAK ?= 30m
# The deciding packages whose share of statements a soak reaches is said.
DECIDING = ./sync/plan,./sync/desired,./sync/dataplane,./sync/reconcile,./sync/fleet,./sync/lb
soak:
	@h="$(HAPROXY)"; if [ ! -x "$$h" ]; then \
	  if command -v haproxy >/dev/null; then echo "soak: $$h is missing (make deps builds it); using the system's $$(command -v haproxy) instead"; \
	  else echo "soak: $$h is missing and no haproxy is on PATH: run make deps (apt-get install haproxy, and builds HAProxy 3.0), or name one: make soak HAPROXY=/path/to/haproxy"; exit 2; fi; fi
	@$(MAKE) --no-print-directory soak-run HAPROXY="$$( [ -x "$(HAPROXY)" ] && echo "$(HAPROXY)" || command -v haproxy)"

soak-run:
	@mkdir -p bin; echo "soak: $(SOAK) on $(HAPROXY) at $$(git describe --always --dirty 2>/dev/null), log in bin/soak.log"
	@rm -rf bin/soak-logs; mkdir -p bin/soak-logs
	@rm -rf bin/soak-covdata bin/serve.cover; mkdir -p bin/soak-covdata
	@HKS_SOAK=$(SOAK) HKS_HAPROXY=$(HAPROXY) HKS_HISTORY_LOG_DIR=$(CURDIR)/bin/soak-logs \
	  HKS_HISTORY_COVERDIR=$(CURDIR)/bin/soak-covdata HKS_HISTORY_COVERPKG=$(DECIDING) $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v \
	  -coverpkg=$(DECIDING) -coverprofile=bin/soak.cover ./sync/history > bin/soak.log 2>&1; rc=$$?; \
	grep -E -- '^ *(--- FAIL|[a-z-]+ after step|seed [0-9]+ \()' bin/soak.log | head -60; \
	grep -E '^histories:' bin/soak.log || { tail -20 bin/soak.log; echo "histories: none finished"; }; \
	if [ -n "$$(ls bin/soak-covdata)" ]; then $(GO) tool covdata textfmt -i=bin/soak-covdata \
	  -pkg=$$($(GO) list $$(echo $(DECIDING) | tr , ' ') | paste -sd, -) -o bin/serve.cover; fi; \
	$(GO) run ./hack/soakcover bin/soak.cover $$( [ -f bin/serve.cover ] && echo bin/serve.cover); exit $$rc

## replay: one history again, from its seed: make replay SEED=N DRIVER=runtime|dataplane SHAPE=short|soak|services|nodes|nodes-soak|serve|serve-soak|slots|slots-soak [LOG=file for the service log] [CONFIG=shipped: the shipped configuration, for a seed found before the configuration was drawn]
replay:
	HKS_HISTORY_SEED=$(SEED) HKS_HISTORY_DRIVER=$(DRIVER) HKS_HISTORY_SHAPE=$(SHAPE) HKS_HAPROXY=$(HAPROXY) HKS_HISTORY_LOG=$(if $(LOG),$(abspath $(LOG))) HKS_HISTORY_TRACE=$(if $(TRACE),$(abspath $(TRACE))) HKS_HISTORY_CONFIG=$(CONFIG) $(GO) test -count=1 -timeout 0 -run '^TestReplay$$' -v ./sync/history

## record-dataplaneapi: record what a real Data Plane API does into
## testdata/dataplaneapi/ (the table the conformance test replays; see
## docs/drivers.md): make record-dataplaneapi DATAPLANEAPI=/path/to/dataplaneapi HAPROXY=/path/to/haproxy
record-dataplaneapi:
	DATAPLANEAPI=$(DATAPLANEAPI) HAPROXY=$(HAPROXY) $(GO) run ./hack/record-dataplaneapi

## fuzz: a short run of each fuzz test; seeds are testdata/events and the tests' f.Add.
## Counted in executions (~20 s each here), not time: a time limit that ends
## while the fuzzer minimizes an input fails with "context deadline exceeded".
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 400000x ./handler/trigger
	$(GO) test -run '^$$' -fuzz '^FuzzParseServersState$$' -fuzztime 600000x ./sync/runtimeapi
	$(GO) test -run '^$$' -fuzz '^FuzzCompute$$' -fuzztime 150000x ./sync/desired

## bench: the numbers quoted in docs/benchmarks.md. The end-to-end scenarios run
## once each (they are long), with the idle period docs/benchmarks.md quotes.
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 5 $$($(GO) list ./... | grep -v /sync/e2e)
	HKS_BENCH_IDLE=1m HKS_BENCH_SERVICES=10,100,500,2000 HKS_BENCH_NODES=5000 HKS_BENCH_ENDPOINTS=10000 HKS_BENCH_ROLLOUT_STEPS=10 HKS_BENCH_ROLLOUT_HTTP=all $(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./sync/e2e

clean:
	rm -rf bin
