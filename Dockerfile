# Builds the velvetrope binary into a small image. Used by docker-compose.yml.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/velvetrope ./cmd/velvetrope
# the state directory (spill files), owned by the user the image runs as
RUN mkdir -p /out/state

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/velvetrope /velvetrope
COPY --from=build --chown=65532:65532 /out/state /var/lib/velvetrope
USER nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/velvetrope"]
