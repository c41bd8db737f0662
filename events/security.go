package events

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is how clients authenticate to and encrypt traffic with the
// brokers; the zero value is plaintext without authentication.
type Security struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
}

// SASLMechanism builds the SASL mechanism name ("plain",
// "scram-sha-256", "scram-sha-512"; empty: none) with its credentials.
func SASLMechanism(name, username, password string) (sasl.Mechanism, error) {
	switch strings.ToLower(name) {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: username, Password: password}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, username, password)
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, username, password)
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q: want plain, scram-sha-256 or scram-sha-512", name)
}

func (s Security) dialer(timeout time.Duration) *kafka.Dialer {
	return &kafka.Dialer{Timeout: timeout, DualStack: true, TLS: s.TLS, SASLMechanism: s.SASL}
}

func (s Security) transport() *kafka.Transport {
	return &kafka.Transport{DialTimeout: time.Second, MetadataTTL: 5 * time.Second, TLS: s.TLS, SASL: s.SASL}
}
