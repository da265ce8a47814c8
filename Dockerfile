# syntax=docker/dockerfile:1
# For those with Docker: a static binary in a distroless image (no shell, no
# package manager, non-root). `make image` builds the image without Docker.
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) -t haproxy-k8s-sync:$(cat VERSION) .

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY handler ./handler
COPY sync ./sync
COPY VERSION ./
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(cat VERSION) -X main.commit=${COMMIT}" \
      -o /out/haproxy-k8s-sync ./cmd/haproxy-k8s-sync

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/haproxy-k8s-sync /haproxy-k8s-sync
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/haproxy-k8s-sync"]
CMD ["serve"]
