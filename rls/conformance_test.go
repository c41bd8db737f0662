package rls

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
)

// conformanceCase is one scenario of testdata/conformance.yaml: requests
// at times relative to testrules.T0 and the answers Envoy's ratelimit service gives.
type conformanceCase struct {
	Name  string `yaml:"name"`
	Steps []struct {
		At          string   `yaml:"at"` // offset from T0, e.g. 59.5s; empty keeps the time
		Domain      string   `yaml:"domain"`
		Hits        uint32   `yaml:"hits"`
		Descriptors []string `yaml:"descriptors"` // "k=v,k2=v2[;hits=N][;limit=N/[M]unit]"
		Repeat      int      `yaml:"repeat"`      // send it this many times, check the last answer
		Want        string   `yaml:"want"`
		Statuses    []string `yaml:"statuses"`
	} `yaml:"steps"`
}

// engines are the checkers every case runs against: the exact in-process
// one and the async one (a single instance, so it must be exact too).
var engines = []struct {
	name string
	make func(t *testing.T, rules *config.Store, clk *testrules.Clock) Checker
}{
	{"local", func(t *testing.T, rules *config.Store, clk *testrules.Clock) Checker {
		return testrules.Local(t, rules, clk, 0)
	}},
	{"async", func(t *testing.T, rules *config.Store, clk *testrules.Clock) Checker {
		ms := counters.NewMemStore()
		ms.SetClock(clk)
		bus, err := events.NewMemBus(1, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		c, err := checker.New(checker.Config{}, rules, ms, bus, clk)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}},
}

func loadEnvoyRules(t testing.TB) *config.Store {
	t.Helper()
	rs, err := config.LoadRules("../config/testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	return config.NewStore(rs)
}

// dial serves s on a loopback listener and returns a client of it.
func dial(t *testing.T, s *Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(dialRaw(t, s))
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// TestEnvoyConformance replays testdata/conformance.yaml through the gRPC
// API: Envoy's documented example configs, unchanged, with the codes,
// limits, remaining and resets Envoy's ratelimit service answers.
func TestEnvoyConformance(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []conformanceCase
	if err := yaml.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d conformance cases loaded", len(cases))
	}
	for _, eng := range engines {
		for _, tc := range cases {
			t.Run(eng.name+"/"+tc.Name, func(t *testing.T) {
				clk := testrules.NewClock()
				client := dial(t, New(eng.make(t, loadEnvoyRules(t), clk), Options{}))
				for i, st := range tc.Steps {
					if st.At != "" {
						d, err := time.ParseDuration(st.At)
						if err != nil {
							t.Fatalf("step %d: at: %v", i, err)
						}
						clk.Set(d)
					}
					req := &rlsv3.RateLimitRequest{Domain: st.Domain, HitsAddend: st.Hits}
					for _, d := range st.Descriptors {
						req.Descriptors = append(req.Descriptors, parseDescriptor(t, d))
					}
					var resp *rlsv3.RateLimitResponse
					for range max(st.Repeat, 1) {
						if resp, err = client.ShouldRateLimit(context.Background(), req); err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
					}
					got := render(resp)
					want := st.Want + " | " + strings.Join(st.Statuses, " | ")
					if got != want {
						t.Fatalf("step %d %v:\n got  %s\n want %s", i, st.Descriptors, got, want)
					}
				}
			})
		}
	}
}

// parseDescriptor reads "k=v,k2=v2[;hits=N][;limit=N/unit]"; an entry without "=" is a
// key with an empty value.
func parseDescriptor(t *testing.T, s string) *ratelimitv3.RateLimitDescriptor {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{}
	entries, opt, _ := strings.Cut(s, ";")
	for _, kv := range strings.Split(entries, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	for _, o := range strings.Split(opt, ";") {
		var n uint64
		var unit string
		switch {
		case o == "":
		case strings.HasPrefix(o, "hits="):
			if _, err := fmt.Sscanf(o, "hits=%d", &n); err != nil {
				t.Fatalf("descriptor %q: %v", s, err)
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		case strings.HasPrefix(o, "limit="):
			rpu, u, _ := strings.Cut(strings.TrimPrefix(o, "limit="), "/")
			if _, err := fmt.Sscanf(rpu, "%d", &n); err != nil {
				t.Fatalf("descriptor %q: %v", s, err)
			}
			mult := strings.TrimRight(u, "abcdefghijklmnopqrstuvwxyz") // limit=N/30second: a unit multiplier
			unit = strings.ToUpper(strings.TrimPrefix(u, mult))
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n),
				Unit: typev3.RateLimitUnit(typev3.RateLimitUnit_value[unit])}
			if mult != "" {
				var m uint32
				if _, err := fmt.Sscanf(mult, "%d", &m); err != nil {
					t.Fatalf("descriptor %q: %v", s, err)
				}
				d.Limit.UnitMultiplier = wrapperspb.UInt32(m)
			}
		default:
			t.Fatalf("descriptor %q: unknown option %q", s, o)
		}
	}
	return d
}

// render prints a response as the test data spells it:
// "CODE | CODE [limit=N/unit[ name=X]] remaining=R [reset=D] | ...".
func render(r *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		b.WriteString(" | " + s.Code.String())
		if l := s.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " limit=%d/%s", l.RequestsPerUnit, strings.ToLower(l.Unit.String()))
			if l.Name != "" {
				b.WriteString(" name=" + l.Name)
			}
		}
		fmt.Fprintf(&b, " remaining=%d", s.LimitRemaining)
		if s.DurationUntilReset != nil {
			b.WriteString(" reset=" + s.DurationUntilReset.AsDuration().String())
		}
	}
	return b.String()
}
