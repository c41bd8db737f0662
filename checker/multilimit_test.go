package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestSeveralLimitsEveryAlgorithm: a descriptor with 2 a minute and 3 an
// hour is held to both on every algorithm and mode; the status names the
// limit that refused; a request one limit refuses is charged to none of
// its limits (Envoy's semantics: to all, refused or not) nor to the
// request's other descriptors.
func TestSeveralLimitsEveryAlgorithm(t *testing.T) {
	// what 5 requests in the first minute and 2 more minutes later get:
	// the minute limit refuses the first minute's last 3, charging
	// nothing, so the hour has room for one more; under Envoy's
	// semantics the refused 3 were charged and the hour is spent.
	const ours = "allow allow deny:minute deny:minute deny:minute | allow deny:hour"
	const envoy = "allow allow deny:minute deny:hour deny:hour | deny:hour deny:hour" // both refuse the 4th and 5th: the hour's wait is the longer
	cases := []struct{ name, ext, want string }{
		{"envoy", "", envoy},
		{"fixed_window", "algorithm: fixed_window", ours},
		{"sliding_window", "algorithm: sliding_window", ours},
		{"token_bucket", "algorithm: token_bucket", ours},
		{"gcra", "algorithm: gcra", ours},
		{"leaky_bucket", "algorithm: leaky_bucket", ours},
		{"sliding_log sync", "algorithm: sliding_log\n        mode: sync", ours},
		{"fixed_window sync", "algorithm: fixed_window\n        mode: sync", ours},
		{"near_limit async", "algorithm: fixed_window\n        near_limit: async", ours},
		{"shards", "algorithm: fixed_window\n        shards: 4", ours},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := fmt.Sprintf(`domain: api
descriptors:
  - key: other
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: k
    %s
    limits:
      - {unit: minute, requests_per_unit: 2}
      - {unit: hour, requests_per_unit: 3}
`, strings.ReplaceAll(c.ext, "\n        ", "\n    "))
			rg := newRigRules(t, Config{InstanceName: "c"}, src)
			ck, clk := rg.c, rg.clk
			decide := func(n int) string {
				var out []string
				for range n {
					var d ratelimit.Decision
					if err := ck.Check(context.Background(), req(1, "k", "v", "other", "o"), &d); err != nil {
						t.Fatal(err)
					}
					st := d.Statuses[0]
					s := st.Code.String()
					if st.Code != ratelimit.OK {
						s += ":" + st.Rule.Unit.String()
						if want := map[config.Unit]string{config.Minute: "api:k", config.Hour: "api:k:#limit:hour"}[st.Rule.Unit]; st.Rule.ID != want {
							t.Fatalf("refused by %q, want %q", st.Rule.ID, want)
						}
					}
					out = append(out, s)
				}
				return strings.Join(out, " ")
			}
			got := decide(5)
			clk.ns.Add(int64(2 * time.Minute))
			got += " | " + decide(2)
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			// the other descriptor (an algorithm rule) was charged only for
			// the admitted requests
			var d ratelimit.Decision
			if err := ck.Check(context.Background(), req(0, "other", "o"), &d); err != nil {
				t.Fatal(err)
			}
			wantOther := int64(100 - strings.Count(got, "allow"))
			if d.Statuses[0].Remaining != wantOther {
				t.Fatalf("the other descriptor has %d remaining, want %d", d.Statuses[0].Remaining, wantOther)
			}
		})
	}
}

// TestThreeLimitsTakeThePooledPath: three limits on one descriptor need
// more slots than the stack gives; the pooled path decides them alike.
func TestThreeLimitsTakeThePooledPath(t *testing.T) {
	rg := newRigRules(t, Config{InstanceName: "c"}, `domain: api
descriptors:
  - key: k
    algorithm: fixed_window
    limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 4}
      - {unit: hour, requests_per_unit: 5}
`)
	ck, clk := rg.c, rg.clk
	var got []string
	for _, step := range []int64{0, 0, 0, 0, int64(time.Second), int64(time.Second), int64(time.Minute), int64(time.Minute)} {
		clk.ns.Add(step)
		var d ratelimit.Decision
		if err := ck.Check(context.Background(), req(1, "k", "v"), &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Code.String()+":"+d.Statuses[0].Rule.Unit.String())
	}
	want := "allow:second allow:second allow:second deny:second allow:minute deny:minute allow:hour deny:hour"
	if strings.Join(got, " ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}

// TestSeveralLimitsRefusingAnswerTheLongestWait: when two limits refuse
// at once the status is the one a retry must wait longest for (under
// Envoy's semantics every limit is asked; with an algorithm a limit that
// needs the store is not asked once another refused, and the status is
// the refusal known — see docs/rules.md).
func TestSeveralLimitsRefusingAnswerTheLongestWait(t *testing.T) {
	for _, c := range []struct{ ext, want string }{
		{"", "api:k:#limit:hour"},
		{"algorithm: fixed_window\n    ", "api:k:#limit:hour"},
	} {
		limits := "limits:\n      - {unit: second, requests_per_unit: 5}\n      - {unit: hour, requests_per_unit: 2}\n"
		if c.ext == "" { // both refuse the third request
			limits = "limits:\n      - {unit: second, requests_per_unit: 2}\n      - {unit: hour, requests_per_unit: 2}\n"
		}
		rg := newRigRules(t, Config{InstanceName: "c"}, "domain: api\ndescriptors:\n  - key: k\n    "+c.ext+limits)
		ck := rg.c
		var d ratelimit.Decision
		for range 3 {
			if err := ck.Check(context.Background(), req(1, "k", "v"), &d); err != nil {
				t.Fatal(err)
			}
		}
		st := d.Statuses[0]
		if st.Code != ratelimit.OverLimit || st.Rule.ID != c.want || st.RetryAfter < 59*time.Minute {
			t.Fatalf("%q: %s by %s, retry after %v; want the hour's wait", c.ext, st.Code, st.Rule.ID, st.RetryAfter)
		}
	}
}
