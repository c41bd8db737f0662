package events

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

func TestSASLMechanism(t *testing.T) {
	cases := []struct {
		name, want, err string
	}{
		{"", "", ""},
		{"plain", "PLAIN", ""},
		{"SCRAM-SHA-256", "SCRAM-SHA-256", ""},
		{"scram-sha-512", "SCRAM-SHA-512", ""},
		{"gssapi", "", `unknown SASL mechanism "gssapi"`},
	}
	for _, c := range cases {
		m, err := SASLMechanism(c.name, "user", "pw")
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%q: got %v, want %q", c.name, err, c.err)
			}
		case err != nil:
			t.Fatalf("%q: %v", c.name, err)
		case c.want == "" && m != nil, c.want != "" && (m == nil || m.Name() != c.want):
			t.Fatalf("%q: got %v, want %s", c.name, m, c.want)
		}
	}
}

// TestSecurityIsUsed: TLS or SASL towards the test broker, which speaks
// neither, fails — so the settings reach the connection instead of being
// dropped on the way.
func TestSecurityIsUsed(t *testing.T) {
	broker := testsvc.Kafka(t)
	for name, sec := range map[string]Security{
		"tls":  {TLS: &tls.Config{ServerName: "127.0.0.1"}},
		"sasl": {SASL: plain.Mechanism{Username: "u", Password: "p"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := EnsureTopic(ctx, sec, []string{broker}, testsvc.Unique("sec"), 1, 1)
		cancel()
		if err == nil {
			t.Fatalf("%s towards a plaintext broker without SASL succeeded", name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EnsureTopic(ctx, Security{}, []string{broker}, testsvc.Unique("sec"), 1, 1); err != nil {
		t.Fatalf("plaintext: %v", err)
	}
}
