package deferred

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// failing is a publisher whose topic refuses everything.
type failing struct{}

func (failing) Publish(context.Context, []events.Message) error { return errors.New("broker down") }
func (failing) Close(context.Context) error                     { return nil }

func deferredDecision(t *testing.T, r *rig) (ratelimit.Request, ratelimit.Decision) {
	t.Helper()
	for {
		req := ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "user_id", Value: "alice"}}}}}
		var d ratelimit.Decision
		if err := r.engine.Check(context.Background(), &req, &d); err != nil {
			t.Fatal(err)
		}
		if d.Code == ratelimit.Deferred {
			return req, d
		}
	}
}

// TestEnqueuePayloads: what a payload may carry, and the field named when
// it may not.
func TestEnqueuePayloads(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	cases := []struct {
		name  string
		p     *Payload
		field string // "" accepted
		large bool
	}{
		{"none", nil, "", false},
		{"text", &Payload{Method: "POST", Path: "/orders?a=1", Headers: map[string]string{"X-Tenant": "a"}, Body: "{}"}, "", false},
		{"binary", &Payload{BodyBase64: base64.StdEncoding.EncodeToString([]byte{0, 1, 2})}, "", false},
		{"at the limit", &Payload{Body: big[:64<<10-3], Method: "PUT"}, "", false},
		{"one byte over", &Payload{Body: big[:64<<10-2], Method: "PUT"}, "payload", true},
		{"bad method", &Payload{Method: "GET /x"}, "payload.method", false},
		{"relative path", &Payload{Path: "orders"}, "payload.path", false},
		{"scheme-relative path", &Payload{Path: "//evil.example/x"}, "payload.path", false},
		{"both bodies", &Payload{Body: "a", BodyBase64: "YQ=="}, "payload.body_base64", false},
		{"bad base64", &Payload{BodyBase64: "***"}, "payload.body_base64", false},
		{"header injection", &Payload{Headers: map[string]string{"X-A": "b\r\nHost: evil"}}, "payload.headers", false},
		{"bad header name", &Payload{Headers: map[string]string{"X A": "b"}}, "payload.headers", false},
		{"reserved header", &Payload{Headers: map[string]string{"idempotency-key": "mine"}}, "payload.headers", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "10m", 5)
			req, d := deferredDecision(t, r)
			rc, err := r.queue.Enqueue(context.Background(), &req, &d, tc.p)
			if tc.field == "" {
				if err != nil || !ValidTicket(rc.Ticket) || rc.Rule == nil {
					t.Fatalf("refused: %v (receipt %+v)", err, rc)
				}
				m, err := r.topic.Fetch(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				it, err := Decode(m.Value)
				if err != nil || it.Ticket != rc.Ticket || string(m.Key) != it.Key || it.Key != "shop:user_id|user_id=alice" {
					t.Fatalf("record %q: %+v %v", m.Key, it, err)
				}
				return
			}
			var fe *ratelimit.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || errors.Is(err, ErrPayloadTooLarge) != tc.large {
				t.Fatalf("got %v, want a refusal of %s (too large: %v)", err, tc.field, tc.large)
			}
			if r.topic.Pending() != 0 {
				t.Fatal("a refused payload reached the topic")
			}
		})
	}
}

// TestEnqueueFailureIsNotQueued: when the topic refuses the record the
// caller gets an error (and must refuse the request), and the ticket,
// never handed out, says failed.
func TestEnqueueFailureIsNotQueued(t *testing.T) {
	r := newRig(t, "10m", 5)
	q := NewQueue(failing{}, r.tickets, nil, time.Hour)
	req, d := deferredDecision(t, r)
	if _, err := q.Enqueue(context.Background(), &req, &d, nil); err == nil || !strings.Contains(err.Error(), "broker down") {
		t.Fatalf("got %v", err)
	}
	if q.EnqueueErrors.Load() != 1 || q.Enqueued.Load() != 0 {
		t.Fatalf("errors %d enqueued %d", q.EnqueueErrors.Load(), q.Enqueued.Load())
	}
	// a decision that is not a defer is not queued
	d.Code = ratelimit.OverLimit
	if _, err := q.Enqueue(context.Background(), &req, &d, nil); !errors.Is(err, ErrNotDeferred) {
		t.Fatalf("got %v", err)
	}
}

// TestEnqueueEstimate: the estimate adds a window for every limit's worth
// of hits deferred ahead, and forgets them as windows pass.
func TestEnqueueEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		var etas []time.Duration
		for range 25 {
			req, d := deferredDecision(t, r)
			rc, err := r.queue.Enqueue(context.Background(), &req, &d, nil)
			if err != nil {
				t.Fatal(err)
			}
			etas = append(etas, rc.ETA)
		}
		// the first 10 wait for the next window (1 s), the next 10 one more
		for i, want := range map[int]time.Duration{0: time.Second, 9: time.Second, 10: 2 * time.Second, 19: 2 * time.Second, 20: 3 * time.Second} {
			if etas[i] != want {
				t.Fatalf("eta %d: %v, want %v (all %v)", i, etas[i], want, etas)
			}
		}
		time.Sleep(3 * time.Second) // the estimate's releases have all happened
		req, d := deferredDecision(t, r)
		rc, _ := r.queue.Enqueue(context.Background(), &req, &d, nil)
		if rc.ETA != time.Second {
			t.Fatalf("after the backlog: %v", rc.ETA)
		}
		st, ok, _ := r.tickets.GetTicket(context.Background(), rc.Ticket)
		if !ok || st.State != counters.TicketQueued || st.EnqueuedAt != time.Now().UnixNano() {
			t.Fatalf("ticket %+v %v", st, ok)
		}
	})
}
