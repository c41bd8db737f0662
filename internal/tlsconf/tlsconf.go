// Package tlsconf builds the TLS configuration of a listener from its
// config section, with errors that name the field at fault.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/velvetrope/velvetrope/config"
)

// Server returns the server TLS configuration for c, or nil when c is not
// enabled. field names the section in errors (e.g. "grpc.tls"). With a
// client CA the listener requires and verifies client certificates.
func Server(c config.TLSConfig, field string) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file/key_file: %w", field, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile != "" {
		pool, err := Pool(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.client_ca_file: %w", field, err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Pool reads a PEM bundle of CA certificates.
func Pool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return pool, nil
}

// Client returns the client TLS configuration for c, or nil when c is not
// enabled. field names the section in errors (e.g. "redis.tls").
func Client(c config.ClientTLS, field string) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := Pool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", field, err)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file/key_file: %w", field, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
