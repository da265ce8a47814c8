# syntax=docker/dockerfile:1
# A static binary in a distroless image: no shell, no package manager, non-root.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t haproxy-k8s-sync .

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY handler ./handler
COPY sync ./sync
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/haproxy-k8s-sync ./cmd/haproxy-k8s-sync

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/haproxy-k8s-sync /haproxy-k8s-sync
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/haproxy-k8s-sync"]
CMD ["serve"]
