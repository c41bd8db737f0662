package client

import (
	"context"
	"errors"
	"testing"

	"github.com/velvetrope/velvetrope/rls"
)

// TestCharge: both transports charge a cost after the response: never
// refused, past the limit (the next check is refused), counted once
// under a request id; a malformed charge wraps ErrInvalidArgument.
func TestCharge(t *testing.T) {
	if chargeMethod != rls.ChargeMethod || requestIDMetadata != rls.RequestIDMetadata {
		t.Fatalf("the client calls %q with %q, the server serves %q with %q", chargeMethod, requestIDMetadata, rls.ChargeMethod, rls.RequestIDMetadata)
	}
	g, h := serve(t)
	ctx := context.Background()
	for name, c := range map[string]func(context.Context, Request) (Response, error){"grpc": g.Charge, "http": h.Charge} {
		t.Run(name, func(t *testing.T) {
			user := one("user", "charged-"+name)
			for range 2 {
				resp, err := c(ctx, Request{Domain: "api", Descriptors: []Descriptor{user}, Hits: 5, RequestID: "c-" + name})
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverLimit || resp.Statuses[0].OverLimit || resp.Statuses[0].Remaining != 0 || resp.Statuses[0].Limit != 2 {
					t.Fatalf("charge answered %+v", resp)
				}
			}
			check, err := g.Check(ctx, Request{Domain: "api", Descriptors: []Descriptor{user}})
			if err != nil || !check.OverLimit {
				t.Fatalf("the check after the charge: %+v %v", check, err)
			}
			if _, err := c(ctx, Request{Domain: "api", Hits: 1}); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("a charge of no descriptors: %v", err)
			}
		})
	}
}
