package sink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDemand: a domain's usage per descriptor and minute, instances and
// streams summed, newest versions only, pools and other domains and
// older minutes left out, ordered by descriptor then minute, bounded.
func TestDemand(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			m := t0.Unix()
			rows := []Row{
				{Minute: m, Domain: "api", Rule: "api:u", Descriptor: "u=b", Instance: "c1", Stream: 1, Version: 1, Allowed: 1},
				{Minute: m, Domain: "api", Rule: "api:u", Descriptor: "u=b", Instance: "c1", Stream: 1, Version: 2, Allowed: 3, Denied: 1, AllowedCost: 3, DeniedCost: 1},
				{Minute: m, Domain: "api", Rule: "api:u", Descriptor: "u=b", Instance: "c2", Stream: 7, Version: 1, Allowed: 2, Deferred: 4, ShadowDenied: 1},
				{Minute: m + 60, Domain: "api", Rule: "api:u", Descriptor: "u=b", Instance: "c1", Stream: 1, Version: 3, Allowed: 5},
				{Minute: m, Domain: "api", Rule: "api:u", Descriptor: "u=a", Instance: "c1", Stream: 2, Version: 1, Denied: 2},
				{Minute: m - 3600, Domain: "api", Rule: "api:u", Descriptor: "u=old", Instance: "c1", Stream: 3, Version: 1, Allowed: 9},
				{Minute: m, Domain: "web", Rule: "web:u", Descriptor: "u=b", Instance: "c1", Stream: 4, Version: 1, Allowed: 9},
				{Minute: m, Domain: "api", Rule: "api:#pool:p", Descriptor: "#pool=p", Instance: "c1", Stream: 5, Version: 1, Allowed: 9, Pool: true},
			}
			if err := s.Insert(ctx, rows); err != nil {
				t.Fatal(err)
			}
			d := s.(Demander)
			got, err := d.Demand(ctx, DemandQuery{Domain: "api", Since: t0.Add(-time.Minute), MaxRows: 10})
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprint([]Demand{
				{Minute: m, Descriptor: "u=a", Denied: 2},
				{Minute: m, Descriptor: "u=b", Allowed: 5, Denied: 1, Deferred: 4, ShadowDenied: 1, AllowedCost: 3, DeniedCost: 1},
				{Minute: m + 60, Descriptor: "u=b", Allowed: 5},
			})
			if fmt.Sprint(got) != want {
				t.Fatalf("demand\n%v\nwant\n%v", got, want)
			}
			if _, err := d.Demand(ctx, DemandQuery{Domain: "api", Since: t0.Add(-time.Minute), MaxRows: 2}); !errors.Is(err, ErrTooMuchDemand) {
				t.Fatalf("over the bound: %v", err)
			}
		})
	}
}
