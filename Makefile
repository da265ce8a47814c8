# haproxy-k8s-sync — build and test targets. `make test` is what CI runs.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build demo test deps vet fmt-check unit bench bench-smoke clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/haproxy-k8s-sync ./cmd/haproxy-k8s-sync

## demo: a local HAProxy synced from testdata/demo/cluster.yaml (no cluster needed).
demo: build
	./hack/demo.sh

## test: everything CI checks, from a fresh machine with only Go installed:
## installs HAProxy and etcd (apt) and builds kube-apiserver when missing.
test: deps fmt-check vet unit bench-smoke

## deps: HAProxy, etcd, iproute2 from Debian; kube-apiserver built into bin/.
deps:
	./hack/install-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The e2e tests re-execute themselves in a private network namespace (root).
unit:
	$(GO) test -race -count=1 ./...

# Runs every benchmark once so they keep compiling and passing their checks.
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

## bench: the numbers quoted in README.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./...

clean:
	rm -rf bin
