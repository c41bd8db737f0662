package sink

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRuleChanges: the audit on memory and ClickHouse — newest first,
// since a time, by domain, limited; a change inserted twice is one row;
// separators and quotes in domains and messages are kept as written.
func TestRuleChanges(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			a := s.(RuleAudit)
			base := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
			domains := []string{"shop", `it's "a:b|c"`}
			for i := 0; i < 6; i++ {
				c := RuleChange{Time: base.Add(time.Duration(i) * time.Minute), Domain: domains[i%2], Version: int64(i/2 + 1),
					From: int64(i / 2), Action: "put", Author: "admin", Message: fmt.Sprintf("change %d: 'quoted', \\back", i),
					Added: i, Removed: 1, Bytes: 100 + i, Instance: "c0"}
				if err := a.InsertRuleChange(ctx, c); err != nil {
					t.Fatal(err)
				}
				if i == 4 { // a retry of the same write
					if err := a.InsertRuleChange(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := a.RuleChanges(ctx, RuleChangesQuery{Since: base.Add(time.Minute), Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range got {
				names = append(names, fmt.Sprintf("%s@%d", c.Domain, c.Version))
			}
			want := fmt.Sprintf("[%s@3 shop@3 %s@2 shop@2 %s@1]", domains[1], domains[1], domains[1])
			if fmt.Sprint(names) != want {
				t.Fatalf("changes %v, want %s", names, want)
			}
			one, err := a.RuleChanges(ctx, RuleChangesQuery{Since: base, Domain: domains[1], Limit: 1})
			if err != nil || len(one) != 1 {
				t.Fatalf("one change of a domain: %+v, %v", one, err)
			}
			c := one[0]
			if c.Domain != domains[1] || c.Version != 3 || c.From != 2 || c.Message != "change 5: 'quoted', \\back" || c.Added != 5 ||
				c.Bytes != 105 || c.Instance != "c0" || !c.Time.Equal(base.Add(5*time.Minute)) {
				t.Fatalf("the change read back: %+v", c)
			}
			if _, err := a.RuleChanges(ctx, RuleChangesQuery{Since: base, Limit: 0}); err == nil {
				t.Fatal("a limit of 0 was taken")
			}
		})
	}
}

// TestClientChangesBesideRuleChanges: a client table's write is audited
// beside the documents' changes, kept apart from a document version of
// the same number, and read back with its table.
func TestClientChangesBesideRuleChanges(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			a := s.(RuleAudit)
			base := time.Date(2026, 12, 4, 11, 0, 0, 0, time.UTC)
			doc := RuleChange{Time: base, Domain: "saas", Version: 3, From: 2, Action: "put", Author: "ci", Message: "m", Instance: "c0"}
			cl := RuleChange{Time: base.Add(time.Second), Domain: "saas", Table: "customers", Version: 3, From: 1, Action: "clients",
				Author: "billing", Message: "sync", Added: 1, Removed: 1, Instance: "c0"}
			for _, c := range []RuleChange{doc, cl, cl} { // the client write retried
				if err := a.InsertRuleChange(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			got, err := a.RuleChanges(ctx, RuleChangesQuery{Since: base, Domain: "saas", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].Time = got[i].Time.UTC() // the server's UTC location is another pointer
			}
			if len(got) != 2 || got[0] != cl || got[1] != doc {
				t.Fatalf("got %+v\nwant %+v and %+v", got, cl, doc)
			}
		})
	}
}
