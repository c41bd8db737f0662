package deferred

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velvetrope/velvetrope/events"
)

// escapingPaths are payload paths a normalising server would resolve
// outside the target's base path (issue 19, item 12), or that hide
// something a server may read as a separator.
var escapingPaths = []string{
	"/../../admin", "/%2e%2e/admin", "/%2E%2E/admin", "/.%2e/admin", "/%2e./admin", "/..", "/a/..", "/a/../../admin",
	"/./admin", "/a/./b", "/.", "/%2e", "/a/%2e/b", "/...", "/%2e%2e%2fadmin", "/a%2f..%2f..%2fadmin", "/a%2F%2E%2E%2Fadmin",
	`/a\..\admin`, "/a%5c..%5cadmin", "/a%5C%2e%2e%5Cadmin", `/..\admin`, `/\\evil/x`, "/%252e%252e/admin",
	"/a/%252e%252e%252fadmin", "/%25252e%25252e/admin", "/..;/admin", "/a/..;x=1/admin", "/%2e%2e;/admin", "/%2e%2e%3b/admin",
	"/..?x=1", "/a/..%3f", "/a/..%23", "/..%00/admin", "/a/%00", "/a/%0d%0a", "/%c0%ae%c0%ae/admin", "/%e0%80%ae/admin",
	"/\u2025/admin", "/\u2024\u2024/admin", "/%E2%80%A5/admin", "/\uff0e\uff0e/admin", "/a\uff0fb", "/a%EF%BC%8F..%EF%BC%8Fb",
	"/a/%u002e%u002e/admin", "/a/%zz", "/a/%2", "/a%", "/%%32%65%%32%65/admin", "/a/%25%32%65%25%32%65/b",
	"/%2525252e%2525252e/admin", // four rounds
}

// TestCheckPath: every escaping path is refused with a reason; ordinary
// paths, with dots inside segments and anything in the query, pass.
func TestCheckPath(t *testing.T) {
	for i, p := range escapingPaths {
		if err := checkPath(p); err == nil {
			t.Errorf("step %d: path %q accepted, want it refused", i, p)
		}
	}
	good := []string{"/", "/orders/7", "/a.b/c..d/...x/.x/x.", "/v1/items?q=../x&r=%2e%2e/..", "/%7Euser/x", "/a%20b",
		"/caf%C3%A9", "/café", "/a;b=c/d", "/a/b/", "/100%25", "/x?"}
	for i, p := range good {
		if err := checkPath(p); err != nil {
			t.Errorf("step %d: path %q refused: %v", i, p, err)
		}
	}
}

// TestEnqueueRefusesEscapingPaths: the queue refuses them naming
// payload.path, before anything is written.
func TestEnqueueRefusesEscapingPaths(t *testing.T) {
	r := newRig(t, "10m", 5)
	req, d := deferredDecision(t, r)
	for i, p := range escapingPaths {
		_, err := r.queue.Enqueue(context.Background(), &req, &d, &Payload{Path: p})
		if err == nil || !strings.HasPrefix(err.Error(), "payload.path: ") {
			t.Fatalf("step %d: path %q: %v, want a refusal naming payload.path", i, p, err)
		}
	}
	if n := r.topic.Pending(); n != 0 {
		t.Fatalf("%d records on the topic", n)
	}
}

// TestDrainRefusesEscapingPaths: a record on the deferred topic is input
// too. Items whose paths escape — written by something else than the
// queue — are set aside as malformed, never delivered and never charged;
// the good item behind them is delivered under the target's base.
func TestDrainRefusesEscapingPaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		for range 10 {
			r.check(t, "alice", nil)
		}
		_, good := r.check(t, "alice", &Payload{Path: "/ok"})
		m, _ := r.topic.Fetch(context.Background())
		var tmpl Item
		if err := json.Unmarshal(m.Value, &tmpl); err != nil {
			t.Fatal(err)
		}
		r.topic.Rewind()
		for _, p := range []string{"/../../admin", "/%2e%2e/admin", "/a%2f..%2fadmin", "/%252e%252e/x"} {
			it := tmpl
			it.Ticket, it.Payload = NewTicket(), &Payload{Path: p}
			b, _ := json.Marshal(&it)
			if err := r.topic.Publish(context.Background(), []events.Message{{Key: []byte(it.Key), Value: b}}); err != nil {
				t.Fatal(err)
			}
		}
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = d.Run(ctx) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		cancel()
		got := r.target.list()
		if len(got) != 1 || got[0].key != good || got[0].url != "http://orders.test:8080/base/ok" {
			t.Fatalf("deliveries %+v, want the good item only, at /base/ok", got)
		}
		dls := r.deadLetters(t)
		if len(dls) != 4 {
			t.Fatalf("%d dead letters, want 4", len(dls))
		}
		for _, dl := range dls {
			if dl.Reason != ReasonMalformed || !strings.Contains(dl.Detail, "dot segment") {
				t.Fatalf("dead letter %s %q, want malformed for the dot segment", dl.Reason, dl.Detail)
			}
		}
		if d.Releases.Load() != 1 {
			t.Fatalf("%d releases, want 1 (the refused items charge nothing)", d.Releases.Load())
		}
	})
}

// TestJoinTarget: the delivery URL keeps the target's scheme, host and
// base path, whatever the path.
func TestJoinTarget(t *testing.T) {
	cases := []struct {
		target, path, want string // want "" refused
	}{
		{"http://t.test/base", "/x?y=1", "http://t.test/base/x?y=1"},
		{"http://t.test/base/", "/", "http://t.test/base/"},
		{"http://t.test", "/x", "http://t.test/x"},
		{"http://t.test:81/b", "@evil.test/x", ""},
		{"http://t.test", "@evil.test/x", ""},
		{"http://t.test", ".evil.test/x", ""},
		{"http://t.test", ":99/x", ""},
		{"http://t.test/base", "x", ""},
	}
	for i, tc := range cases {
		got, err := joinTarget(tc.target, tc.path)
		if tc.want == "" {
			if err == nil {
				t.Errorf("step %d: %s + %s = %s, want refused", i, tc.target, tc.path, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("step %d: %s + %s = %q %v, want %s", i, tc.target, tc.path, got, err, tc.want)
		}
	}
}

// FuzzCheckPath: checkPath never panics, and a path it accepts has no
// dot segment, no backslash and no control character after any number of
// percent-decodings, and joins to a URL under the target's base.
func FuzzCheckPath(f *testing.F) {
	for _, p := range escapingPaths {
		f.Add(p)
	}
	f.Add("/orders/7?x=../y")
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) != nil {
			return
		}
		path, _, _ := strings.Cut(p, "?")
		for range maxPathDecodes + 2 {
			if strings.ContainsAny(path, "\\\x00\r\n") {
				t.Fatalf("%q accepted, holds %q", p, path)
			}
			for seg := range strings.SplitSeq(path, "/") {
				if seg != "" && strings.Trim(seg, ".") == "" {
					t.Fatalf("%q accepted, has the dot segment %q in %q", p, seg, path)
				}
			}
			path, _ = percentDecode(path)
		}
		if _, err := joinTarget("http://t.test/base", p); err != nil {
			t.Fatalf("%q accepted, joins outside the target: %v", p, err)
		}
	})
}
