package httpjson

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestWire pins the bytes of every body, each field set and each left
// empty: the names, what is omitted and how values are written are the
// API (docs/http-api.md, docs/analytics.md), which a client built against
// an older server still reads. Each full value decodes back to itself.
func TestWire(t *testing.T) {
	one, two := int64(1), int64(2)
	at := time.Date(2026, 11, 30, 11, 50, 0, 0, time.UTC)
	later := at.Add(1500 * time.Millisecond)
	steps := []struct {
		v    any
		want string
	}{
		{&CheckRequest{Domain: "api", Hits: &one, RequestID: "r1",
			Descriptors: []Descriptor{{Entries: []Entry{{Key: "k", Value: "v"}}, Hits: &two}},
			Payload:     &Payload{Method: "PUT", Path: "/x?y=1", Headers: map[string]string{"A": "b"}, Body: "text", BodyBase64: "AA=="}},
			`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":2}],"hits":1,"request_id":"r1",` +
				`"payload":{"method":"PUT","path":"/x?y=1","headers":{"A":"b"},"body":"text","body_base64":"AA=="}}`},
		{&CheckRequest{}, `{"domain":"","descriptors":null}`},
		{&Payload{}, `{}`},
		{&CheckResponse{Decision: "defer", Ticket: "t", RetryAfterMS: 3, DeferError: "e", Statuses: []Status{{
			Decision: "defer", Rule: "api:k", Limit: 4, Unit: "minute", Remaining: 5, ResetAfterMS: 6, RetryAfterMS: 7,
			RetryNever: true, Unlimited: true, Shadowed: true, OverSoft: true, Elastic: true, Degraded: true}}},
			`{"decision":"defer","ticket":"t","retry_after_ms":3,"defer_error":"e","statuses":[{"decision":"defer","rule":"api:k",` +
				`"limit":4,"unit":"minute","remaining":5,"reset_after_ms":6,"retry_after_ms":7,"retry_never":true,"unlimited":true,` +
				`"shadowed":true,"over_soft":true,"elastic":true,"degraded":true}]}`},
		{&CheckResponse{Statuses: []Status{{}}},
			`{"decision":"","statuses":[{"decision":"","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0}]}`},
		{&ErrorResponse{Error: "bad", Field: "hits"}, `{"error":"bad","field":"hits"}`},
		{&ErrorResponse{}, `{"error":""}`},
		{&Ticket{Ticket: "t", State: "delivered", Attempts: 2, EnqueuedAt: &at, DeliveredAt: &later, Reason: "r"},
			`{"ticket":"t","state":"delivered","attempts":2,"enqueued_at":"2026-11-30T11:50:00Z","delivered_at":"2026-11-30T11:50:01.5Z","reason":"r"}`},
		{&Ticket{}, `{"ticket":"","state":"","attempts":0}`},
		{&TopDenied{Window: "1h", Keys: []KeyUsage{{Domain: "d", Rule: "r", Descriptor: "k=v", Denied: 1, Allowed: 2, Deferred: 3,
			ShadowDenied: 4, OverSoft: 5, Elastic: 6, Late: 7}}},
			`{"window":"1h","keys":[{"domain":"d","rule":"r","descriptor":"k=v","denied":1,"allowed":2,"deferred":3,"shadow_denied":4,"over_soft":5,"elastic":6,"late":7}]}`},
		{&Usage{Window: "6h", Domain: "d", Key: "k=v", Minutes: []MinuteUsage{{Minute: at, Allowed: 1, Denied: 2, Deferred: 3,
			ShadowDenied: 4, OverSoft: 5, Elastic: 6, AllowedCost: 7, DeniedCost: 8, Late: 9, LateCost: 10}}},
			`{"window":"6h","domain":"d","key":"k=v","minutes":[{"minute":"2026-11-30T11:50:00Z","allowed":1,"denied":2,"deferred":3,` +
				`"shadow_denied":4,"over_soft":5,"elastic":6,"allowed_cost":7,"denied_cost":8,"late":9,"late_cost":10}]}`},
		{&Timeline{Window: "1h", Minutes: []MinuteUsage{}}, `{"window":"1h","minutes":[]}`},
		{&Rules{Window: "1h", Rules: []RuleUsage{{Domain: "d", Rule: "r", Allowed: 1, Denied: 2, Deferred: 3, ShadowDenied: 4,
			OverSoft: 5, Elastic: 6, Late: 7, DenyRate: 0.25}}},
			`{"window":"1h","rules":[{"domain":"d","rule":"r","allowed":1,"denied":2,"deferred":3,"shadow_denied":4,"over_soft":5,"elastic":6,"late":7,"deny_rate":0.25}]}`},
		{&Pools{Window: "1h", Pools: []PoolUsage{{Domain: "d", Pool: "p", Rule: "d:#pool:p", Borrowed: 1, BorrowedHits: 2, Refused: 3}}},
			`{"window":"1h","pools":[{"domain":"d","pool":"p","rule":"d:#pool:p","borrowed":1,"borrowed_hits":2,"refused":3}]}`},
		{&RuleChanges{Window: "7d", Changes: []RuleChange{{Time: at, Domain: "d", Version: 2, From: 1, Action: "put", Author: "admin",
			Message: "m", Added: 3, Removed: 4, Bytes: 5, Instance: "c0"}}},
			`{"window":"7d","changes":[{"time":"2026-11-30T11:50:00Z","domain":"d","version":2,"from_version":1,"action":"put",` +
				`"author":"admin","message":"m","added":3,"removed":4,"bytes":5,"instance":"c0"}]}`},
	}
	for i, s := range steps {
		got, err := json.Marshal(s.v)
		if err != nil || string(got) != s.want {
			t.Fatalf("step %d: %T encodes as\n %s, %v\nwant %s", i, s.v, got, err, s.want)
		}
		back := reflect.New(reflect.TypeOf(s.v).Elem())
		if err := json.Unmarshal(got, back.Interface()); err != nil || !reflect.DeepEqual(back.Interface(), s.v) {
			t.Fatalf("step %d: %s decodes as %+v, %v; want %+v", i, got, back.Elem(), err, reflect.ValueOf(s.v).Elem())
		}
	}
}
