# jobkeeper's controller image: the lean jobkeeper-controller binary (no
# embedded apiserver, etcd or node agent), static, on distroless, running as
# nonroot (uid 65532). Build from the repository root:
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/jobkeeper/jobkeeper:v0.1.0 .
# The Helm chart (deploy/helm/jobkeeper) takes the image as image.repository/image.tag.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that source changes reuse the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
# Static (no cgo), trimmed paths, version stamped as in pkg/version.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X jobkeeper.dev/jobkeeper/pkg/version.Version=${VERSION}" \
      -o /out/jobkeeper-controller ./cmd/jobkeeper-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/jobkeeper-controller /jobkeeper-controller
USER nonroot:nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/jobkeeper-controller"]
CMD ["controller"]
