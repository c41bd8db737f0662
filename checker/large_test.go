package checker

import (
	"context"
	"testing"

	"github.com/velvetrope/velvetrope/ratelimit"
)

const largeRules = `domain: api
descriptors:
  - key: later
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: hard
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestLargeRequestsStartClean: requests of more descriptors than the stack
// holds decide in pooled working memory, which must start as fresh as the
// stack's: a slot left by a deferring rule's request must not make a later
// request's refusal under a rule that denies a deferral (the drain would
// then queue work nobody may run).
func TestLargeRequestsStartClean(t *testing.T) {
	c := newRigRules(t, Config{}, largeRules).c
	many := func(key string, n int) *ratelimit.Request {
		kv := make([]string, 0, 2*n)
		for i := range n {
			kv = append(kv, key, string(rune('a'+i)))
		}
		return req(1, kv...)
	}
	var d ratelimit.Decision
	// (several rounds: the race detector's pool drops some of what is put back)
	for round := range 20 {
		if err := c.Check(context.Background(), many("later", smallRequest+2), &d); err != nil {
			t.Fatal(err)
		}
		if !d.Allowed() {
			t.Fatalf("round %d: the deferring rule's request: %s, want OK", round, codes(d))
		}
		if err := c.Check(context.Background(), many("hard", smallRequest+2), &d); err != nil {
			t.Fatal(err)
		}
		want := ratelimit.OverLimit
		if round == 0 {
			want = ratelimit.OK
		}
		if d.Code != want {
			t.Fatalf("round %d: the denying rule's request: %s, want %v", round, codes(d), want)
		}
		for i, st := range d.Statuses {
			if st.Code == ratelimit.Deferred {
				t.Fatalf("round %d: status %d deferred under rule %s, which denies", round, i, st.Rule.ID)
			}
		}
	}
}
