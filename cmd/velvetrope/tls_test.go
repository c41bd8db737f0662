package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/sink"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type pki struct {
	dir                       string
	caPool                    *x509.CertPool
	clientCert                tls.Certificate
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), caPool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "velvetrope test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.caPool.AddCert(ca)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = write("ca.pem", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.certFile = write("server.pem", "CERTIFICATE", srvDER)
	kb, _ := x509.MarshalECPrivateKey(srvKey)
	p.keyFile = write("server-key.pem", "EC PRIVATE KEY", kb)
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	p.clientCert = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return p
}

// TestTLSListeners: HTTPS on the HTTP listener, mutual TLS on the gRPC one.
func TestTLSListeners(t *testing.T) {
	p := newPKI(t)
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	app.HTTP.TLS = config.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}
	app.GRPC.TLS = config.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile}
	if err := app.Validate(); err != nil {
		t.Fatal(err)
	}
	var srv *httpapi.Server
	var gl *grpcListener
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&srv, &gl))
	fxApp.RequireStart()
	defer fxApp.RequireStop()

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.caPool}, ForceAttemptHTTP2: true}}
	r, err := hc.Get("https://" + srv.Addr() + "/healthz")
	if err != nil || r.StatusCode != 200 || r.ProtoMajor != 2 {
		t.Fatalf("HTTPS: %v %v", r, err)
	}
	r.Body.Close()
	if r, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil && r.StatusCode == 200 {
		t.Fatal("plaintext HTTP answered on a TLS listener")
	}

	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "tls"}}}}}
	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(gl.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		return err
	}
	if err := call(&tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.clientCert}}); err != nil {
		t.Fatalf("mTLS with a client certificate: %v", err)
	}
	if err := call(&tls.Config{RootCAs: p.caPool}); err == nil {
		t.Fatal("mTLS listener accepted a client without a certificate")
	}
}

func TestTLSConfigErrorsNameTheField(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	app.GRPC.TLS = config.TLSConfig{CertFile: "/nonexistent/cert.pem", KeyFile: "/nonexistent/key.pem"}
	err := fx.New(devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(new(*grpcListener))).Err()
	if err == nil || !strings.Contains(err.Error(), "grpc.tls.cert_file/key_file") {
		t.Fatalf("got %v", err)
	}
	app.GRPC.TLS = config.TLSConfig{KeyFile: "k.pem"}
	if err := app.Validate(); err == nil || !strings.Contains(err.Error(), "grpc.tls: cert_file and key_file go together") {
		t.Fatalf("got %v", err)
	}
}

// TestRedisTLS: a TLS-only Redis is reached with redis.tls and the CA, and
// refused when the server cannot be verified.
func TestRedisTLS(t *testing.T) {
	p := newPKI(t)
	addr := testsvc.StartRedisTLS(t, p.certFile, p.keyFile, p.caFile)
	for _, c := range []struct {
		name string
		tls  config.ClientTLS
		err  string
	}{
		{"verified", config.ClientTLS{Enabled: true, CAFile: p.caFile}, ""},
		{"unknown authority", config.ClientTLS{Enabled: true}, "certificate"},
		{"missing CA file", config.ClientTLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}, "redis.tls.ca_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := config.DefaultApp()
			app.Redis.Addrs, app.Redis.TLS = []string{addr}, c.tls
			a := fx.New(fx.Supply(app), fx.Provide(newShutdown, newRedis), fx.Invoke(func(redis.UniversalClient) {}),
				fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }))
			err := a.Err()
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err = a.Start(ctx); err == nil {
					defer a.Stop(ctx)
				}
			}
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("got %v, want %q", err, c.err)
			}
		})
	}
}

// TestClickHouseTLS: the analytics store reached over TLS with the CA from
// config (clickhouse.tls), on a private ClickHouse 18.16 that speaks TLS
// with a certificate made in the test; without the CA the handshake fails.
func TestClickHouseTLS(t *testing.T) {
	p := newPKI(t)
	srv := testsvc.StartPrivateClickHouseTLS(t, p.certFile, p.keyFile)
	app := config.DefaultApp()
	app.ClickHouse.Addr, app.ClickHouse.Database = srv.Addr, testsvc.Unique("tls")
	app.ClickHouse.TLS = config.ClientTLS{Enabled: true, CAFile: p.caFile}
	if err := app.Validate(); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := clickHouse(app, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	row := sink.Row{Minute: time.Now().Unix() / 60 * 60, Domain: "api", Rule: "api:k", Descriptor: "k=tls", Instance: "c/1", Stream: 1, Version: 1, Denied: 2}
	if err := ch.Insert(ctx, []sink.Row{row}); err != nil {
		t.Fatal(err)
	}
	top, err := ch.TopDenied(ctx, sink.TopQuery{Since: time.Now().Add(-time.Hour), Limit: 5})
	if err != nil || len(top) != 1 || top[0].Descriptor != "k=tls" {
		t.Fatalf("over TLS: %+v %v", top, err)
	}
	app.ClickHouse.TLS = config.ClientTLS{Enabled: true} // the system roots do not know the test CA
	untrusted, err := clickHouse(app, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if err := untrusted.Ping(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an untrusted server certificate was accepted: %v", err)
	}
}
