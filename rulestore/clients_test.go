package rulestore

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustSet(t *testing.T, s *Store, table string, cs ...ClientChange) int64 {
	t.Helper()
	seq, err := s.SetClients(ctxT(t), "api", table, cs)
	if err != nil {
		t.Fatalf("set %v: %v", cs, err)
	}
	return seq
}

func cl(plan string, vals ...string) ClientChange { return ClientChange{Client: vals, Plan: plan} }

// scanAll is a table as ScanClients sees it, by encoded client.
func scanAll(t *testing.T, s *Store, table string) (map[string]string, int64) {
	t.Helper()
	got := map[string]string{}
	seq, err := s.ScanClients(ctxT(t), "api", table, func(c ClientChange) error {
		got[EncodeClient(c.Client)] = c.Plan
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, seq
}

// TestClientTables: writes take sequence numbers by their changes, a
// client of several values is never another's, a removal is a change, and
// the log gives every batch in order.
func TestClientTables(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			if seq := mustSet(t, s, "customers", cl("pro", "acme"), cl("ent", "a", "b"), cl("free", "a\x01b")); seq != 3 {
				t.Fatalf("seq %d after 3 changes", seq)
			}
			for _, c := range []struct {
				client []string
				plan   string
			}{{[]string{"acme"}, "pro"}, {[]string{"a", "b"}, "ent"}, {[]string{"a\x01b"}, "free"}, {[]string{"ab"}, ""}, {[]string{"a"}, ""}} {
				p, ok, err := s.ClientPlan(ctx, "api", "customers", c.client)
				if err != nil || p != c.plan || ok != (c.plan != "") {
					t.Fatalf("%q: %q %v %v, want %q", c.client, p, ok, err, c.plan)
				}
			}
			if seq := mustSet(t, s, "customers", cl("", "acme"), cl("pro", "zed")); seq != 5 {
				t.Fatalf("seq %d", seq)
			}
			info, err := s.Table(ctx, "api", "customers")
			if err != nil || info.Seq != 5 || info.Clients != 3 || strings.Join(info.Plans, ",") != "ent,free,pro" {
				t.Fatalf("info %+v %v", info, err)
			}
			bs, err := s.ClientChanges(ctx, "api", "customers", 0, 0)
			if err != nil || len(bs) != 2 || bs[0].Seq != 3 || bs[1].Seq != 5 || len(bs[1].Changes) != 2 ||
				bs[1].Changes[0].Plan != "" || bs[1].Changes[0].Client[0] != "acme" || len(bs[0].Changes[1].Client) != 2 {
				t.Fatalf("log %+v %v", bs, err)
			}
			if bs, err := s.ClientChanges(ctx, "api", "customers", 3, 0); err != nil || len(bs) != 1 || bs[0].Seq != 5 {
				t.Fatalf("log after 3: %+v %v", bs, err)
			}
			if bs, err := s.ClientChanges(ctx, "api", "customers", 5, 0); err != nil || len(bs) != 0 {
				t.Fatalf("log after 5: %+v %v", bs, err)
			}
			// another table, another domain: nothing shared
			if info, _ := s.Table(ctx, "api", "other"); info.Seq != 0 || info.Clients != 0 {
				t.Fatalf("other table %+v", info)
			}
			if p, ok, _ := s.ClientPlan(ctx, "api2", "customers", []string{"zed"}); ok {
				t.Fatalf("another domain's table has zed at %q", p)
			}
		})
	}
}

// TestClientLogWaits: a follower waiting on the log is woken by a write,
// and given nothing when none comes.
func TestClientLogWaits(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			seq := mustSet(t, s, "t", cl("a", "x"))
			done := make(chan []ClientBatch, 1)
			go func() {
				bs, err := s.ClientChanges(ctx, "api", "t", seq, 5*time.Second)
				if err != nil {
					t.Error(err)
				}
				done <- bs
			}()
			time.Sleep(50 * time.Millisecond) // the follower is (likely) waiting: either way it must see the write
			mustSet(t, s, "t", cl("b", "y"))
			select {
			case bs := <-done:
				if len(bs) != 1 || bs[0].Changes[0].Plan != "b" {
					t.Fatalf("woken with %+v", bs)
				}
			case <-time.After(4 * time.Second):
				t.Fatal("a waiting follower was not woken by a write")
			}
			start := time.Now()
			if bs, err := s.ClientChanges(ctx, "api", "t", seq+1, 200*time.Millisecond); err != nil || len(bs) != 0 {
				t.Fatalf("%+v %v", bs, err)
			}
			if d := time.Since(start); d < 150*time.Millisecond {
				t.Fatalf("returned after %v, before the wait", d)
			}
		})
	}
}

// TestClientLogGap: a follower further behind than the log keeps is told
// to scan again, and a scan and the log after it give the table.
func TestClientLogGap(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			for b := 0; b*MaxClientChanges <= ClientLogChanges+MaxClientChanges; b++ {
				cs := make([]ClientChange, MaxClientChanges)
				for i := range cs {
					cs[i] = cl("p"+strconv.Itoa(b%3), "c"+strconv.Itoa(i))
				}
				mustSet(t, s, "big", cs...)
			}
			if _, err := s.ClientChanges(ctx, "api", "big", 0, 0); !errors.Is(err, ErrClientLogGap) {
				t.Fatalf("a follower at 0 after %d changes: %v, want ErrClientLogGap", ClientLogChanges+2*MaxClientChanges, err)
			}
			got, seq := scanAll(t, s, "big")
			if len(got) != MaxClientChanges || seq != int64(ClientLogChanges+2*MaxClientChanges) {
				t.Fatalf("scan: %d clients at seq %d", len(got), seq)
			}
			if bs, err := s.ClientChanges(ctx, "api", "big", seq-MaxClientChanges, 0); err != nil || len(bs) != 1 {
				t.Fatalf("the last batch: %d %v", len(bs), err)
			}
		})
	}
}

// TestClientFollowerConverges: a follower that scans while a writer
// writes, then applies the log from the scan's sequence number, ends
// holding exactly the table.
func TestClientFollowerConverges(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			rng := rand.New(rand.NewPCG(7, 7))
			write := func() {
				cs := make([]ClientChange, 1+rng.IntN(50))
				for i := range cs {
					cs[i] = cl([]string{"", "a", "b", "c"}[rng.IntN(4)], "c"+strconv.Itoa(rng.IntN(500)))
				}
				mustSet(t, s, "live", cs...)
			}
			for range 20 {
				write()
			}
			var wg sync.WaitGroup
			wg.Add(1)
			stop := make(chan struct{})
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						write()
					}
				}
			}()
			mine, seq := scanAll(t, s, "live")
			for range 20 {
				bs, err := s.ClientChanges(ctx, "api", "live", seq, 0)
				if err != nil {
					t.Fatal(err)
				}
				seq = applyBatches(mine, seq, bs)
			}
			close(stop)
			wg.Wait()
			bs, err := s.ClientChanges(ctx, "api", "live", seq, 0)
			if err != nil {
				t.Fatal(err)
			}
			applyBatches(mine, seq, bs)
			if want, _ := scanAll(t, s, "live"); !maps.Equal(mine, want) {
				t.Fatalf("the follower holds %d clients, the table %d (or plans differ)", len(mine), len(want))
			}
		})
	}
}

// applyBatches applies a log's batches to a follower's copy, as a
// checker does, and returns the sequence number it reached.
func applyBatches(mine map[string]string, seq int64, bs []ClientBatch) int64 {
	for _, b := range bs {
		for _, c := range b.Changes {
			if c.Plan == "" {
				delete(mine, EncodeClient(c.Client))
			} else {
				mine[EncodeClient(c.Client)] = c.Plan
			}
		}
		seq = b.Seq
	}
	return seq
}

// TestClientInput: what a client table refuses, naming the field.
func TestClientInput(t *testing.T) {
	long := strings.Repeat("x", MaxClientValueBytes+1)
	many := make([]ClientChange, MaxClientChanges+1)
	for i := range many {
		many[i] = cl("p", "c"+strconv.Itoa(i))
	}
	cases := []struct {
		table string
		cs    []ClientChange
		want  string
	}{
		{"Bad", []ClientChange{cl("p", "a")}, "table: \"Bad\" holds 'B'"},
		{"t", nil, "changes: no changes"},
		{"t", many, "changes: 10001 changes, more than 10000"},
		{"t", []ClientChange{cl("p")}, "changes[0].client: no values"},
		{"t", []ClientChange{cl("p", "a"), cl("p", "")}, "changes[1].client[0]: is empty"},
		{"t", []ClientChange{cl("p", long)}, "changes[0].client[0]: is 1025 bytes"},
		{"t", []ClientChange{cl("p", "a\xffb")}, "changes[0].client[0]: is not UTF-8 text: invalid byte at offset 1"},
		{"t", []ClientChange{cl("Pro", "a")}, "changes[0].plan: \"Pro\" holds 'P'"},
		{"t", []ClientChange{cl("p", "1", "2", "3", "4", "5", "6", "7", "8", "9")}, "changes[0].client: 9 values, more than 8"},
	}
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				_, err := s.SetClients(ctxT(t), "api", c.table, c.cs)
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v, want an input error with %q", c.want, err, c.want)
				}
			}
			// the plan names a table may give are bounded; a batch past the
			// bound changes nothing
			cs := make([]ClientChange, 1000)
			for i := range cs {
				cs[i] = cl(fmt.Sprintf("p%d", i), "c"+strconv.Itoa(i))
			}
			mustSet(t, s, "names", cs...)
			if _, err := s.SetClients(ctxT(t), "api", "names", []ClientChange{cl("p1", "c1"), cl("one-more", "zz1"), cl("p0", "zz")}); err == nil ||
				!strings.Contains(err.Error(), "would name 1001 plans, more than 1000") {
				t.Fatalf("the 1001st plan name: %v", err)
			}
			if info, _ := s.Table(ctxT(t), "api", "names"); info.Seq != 1000 || info.Clients != 1000 || len(info.Plans) != 1000 {
				t.Fatalf("a refused batch changed the table: %+v", info.Seq)
			}
			if p, _, _ := s.ClientPlan(ctxT(t), "api", "names", []string{"c2"}); p != "p2" {
				t.Fatalf("c2 is %q after a refused batch", p)
			}
			// a plan no client is on any more is forgotten: moving c1 off p1
			// (and c2 through p1 and off it in one batch) leaves room for one
			mustSet(t, s, "names", cl("p0", "c1"), cl("p1", "c2"), cl("p0", "c2"))
			if info, _ := s.Table(ctxT(t), "api", "names"); len(info.Plans) != 998 {
				t.Fatalf("%d plans in use, want 998 (p1 and p2 have no client)", len(info.Plans))
			}
			mustSet(t, s, "names", cl("one-more", "n1"), cl("two-more", "n2"))
			if _, err := s.SetClients(ctxT(t), "api", "names", []ClientChange{cl("three-more", "n3")}); err == nil {
				t.Fatal("a 1001st plan in use was taken")
			}
			cs = []ClientChange{cl("", "n1"), cl("", "n2")}
			for i := range 1000 {
				cs = append(cs, cl("", "c"+strconv.Itoa(i)))
			}
			mustSet(t, s, "names", cs...)
			if info, _ := s.Table(ctxT(t), "api", "names"); info.Clients != 0 || len(info.Plans) != 0 {
				t.Fatalf("every client removed: %d clients, plans %v", info.Clients, info.Plans)
			}
		})
	}
}
