package sink

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// t0 is a minute boundary.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() int64 { return c.ns.Load() }

// recorder is a producer that keeps what it is given.
type recorder struct{ all []*eventsv1.Delta }

func (r *recorder) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	r.all = append(r.all, ds...)
	return nil
}
func (r *recorder) Close(context.Context) error { return nil }

const mixRules = `domain: api
descriptors:
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// mix is a known traffic mix: the deltas a real checker emitted for it
// (one flush per decision, so each delta is one decision in its minute),
// and what the decisions were.
type mix struct {
	deltas   []*eventsv1.Delta
	keys     map[string]*KeyUsage // "domain|rule|descriptor"
	perMin   map[string]map[int64]*MinuteUsage
	timeline map[int64]*MinuteUsage
}

func newMix(t *testing.T, n int, seed uint64) *mix {
	t.Helper()
	f, err := config.ParseRules("r.yaml", []byte(mixRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.ns.Store(t0.UnixNano())
	ms := counters.NewMemStore()
	ms.SetClock(clk)
	rec := &recorder{}
	c, err := checker.New(checker.Config{InstanceName: "mix"}, config.NewStore(rs), ms, rec, clk)
	if err != nil {
		t.Fatal(err)
	}
	m := &mix{keys: map[string]*KeyUsage{}, perMin: map[string]map[int64]*MinuteUsage{}, timeline: map[int64]*MinuteUsage{}}
	rng := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	for range n {
		clk.ns.Add(int64(rng.IntN(400)) * int64(time.Millisecond)) // ~3 minutes for 900 requests
		key := []string{"user", "ip"}[rng.IntN(2)]
		val := fmt.Sprintf("%c", 'a'+rng.IntN(4))
		var d ratelimit.Decision
		req := &ratelimit.Request{Domain: "api", Hits: int64(1 + rng.IntN(2)), Descriptors: []ratelimit.Descriptor{
			{Entries: []config.Entry{{Key: key, Value: val}}}}}
		if err := c.Check(ctx, req, &d); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rule := d.Statuses[0].Rule.ID
		desc := key + "=" + val
		k := "api|" + rule + "|" + desc
		u := m.keys[k]
		if u == nil {
			u = &KeyUsage{Domain: "api", Rule: rule, Descriptor: desc}
			m.keys[k] = u
		}
		minute := clk.Now() / 1e9 / 60 * 60
		if m.perMin[desc] == nil {
			m.perMin[desc] = map[int64]*MinuteUsage{}
		}
		pm := m.perMin[desc][minute]
		if pm == nil {
			pm = &MinuteUsage{Minute: time.Unix(minute, 0).UTC()}
			m.perMin[desc][minute] = pm
		}
		tl := m.timeline[minute]
		if tl == nil {
			tl = &MinuteUsage{Minute: time.Unix(minute, 0).UTC()}
			m.timeline[minute] = tl
		}
		if d.Allowed() {
			u.Allowed++
			pm.Allowed++
			tl.Allowed++
			pm.AllowedCost += uint64(req.Hits)
			tl.AllowedCost += uint64(req.Hits)
		} else {
			u.Denied++
			pm.Denied++
			tl.Denied++
			pm.DeniedCost += uint64(req.Hits)
			tl.DeniedCost += uint64(req.Hits)
		}
	}
	m.deltas = rec.all
	if len(m.deltas) < n {
		t.Fatalf("%d deltas for %d decisions", len(m.deltas), n)
	}
	return m
}

// top is the expected TopDenied answer.
func (m *mix) top(limit int) []KeyUsage {
	var out []KeyUsage
	for _, u := range m.keys {
		if u.Denied > 0 {
			out = append(out, *u)
		}
	}
	slices.SortFunc(out, compareTop)
	return out[:min(limit, len(out))]
}

func sorted(m map[int64]*MinuteUsage) []MinuteUsage {
	var out []MinuteUsage
	for _, u := range m {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b MinuteUsage) int { return a.Minute.Compare(b.Minute) })
	return out
}

// check compares every query's answer with the mix.
func (m *mix) check(t *testing.T, s Analytics) {
	t.Helper()
	ctx := context.Background()
	since := t0.Add(-time.Hour)
	top, err := s.TopDenied(ctx, TopQuery{Since: since, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := m.top(100); !slices.Equal(top, want) {
		t.Fatalf("top denied:\n got %+v\nwant %+v", top, want)
	}
	if top3, _ := s.TopDenied(ctx, TopQuery{Since: since, Limit: 3, Domain: "api"}); !slices.Equal(top3, m.top(3)) {
		t.Fatalf("top 3: %+v", top3)
	}
	for desc, per := range m.perMin {
		got, err := s.Usage(ctx, UsageQuery{Since: since, Domain: "api", Descriptor: desc})
		if err != nil {
			t.Fatal(err)
		}
		if want := sorted(per); !slices.Equal(got, want) {
			t.Fatalf("usage of %s:\n got %+v\nwant %+v", desc, got, want)
		}
	}
	tl, err := s.Timeline(ctx, TimelineQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if want := sorted(m.timeline); !slices.Equal(tl, want) {
		t.Fatalf("timeline:\n got %+v\nwant %+v", tl, want)
	}
	rules, err := s.Rules(ctx, RulesQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied uint64
	for _, r := range rules {
		allowed += r.Allowed
		denied += r.Denied
		if r.DenyRate != DenyRate(r.Allowed, r.Denied, r.Deferred, r.ShadowDenied) {
			t.Fatalf("deny rate of %s: %v", r.Rule, r.DenyRate)
		}
	}
	var wa, wd uint64
	for _, u := range m.keys {
		wa += u.Allowed
		wd += u.Denied
	}
	if len(rules) != 2 || allowed != wa || denied != wd {
		t.Fatalf("rules: %+v, want %d allowed and %d denied over 2 rules", rules, wa, wd)
	}
}

// stores returns a fresh Memory store and, with the test services, a
// ClickHouse store on a database of its own.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	mem := NewMemory(0)
	mem.SetClock(func() time.Time { return t0.Add(time.Hour) }) // the rows' own day, whatever today is
	out := map[string]Store{"memory": mem}
	if os.Getenv(testsvc.EnvClickHouse) != "" {
		out["clickhouse"] = newCH(t, testsvc.ClickHouse(t), nil)
	}
	return out
}

func newCH(t *testing.T, addr string, log *bytes.Buffer) *ClickHouse {
	t.Helper()
	var logger *slog.Logger
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, nil))
	}
	db := testsvc.Unique("sink")
	ch, err := NewClickHouse(ClickHouseConfig{Addr: addr, Database: db, RetentionDays: 30, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ch.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ch.db)
		ch.Close()
	})
	return ch
}

func writer(t *testing.T, s Store) *Writer {
	t.Helper()
	w, err := NewWriter(WriterConfig{}, s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// feed adds deltas in batches of size n, flushing after each batch.
func feed(t *testing.T, w *Writer, deltas []*eventsv1.Delta, n int) {
	t.Helper()
	for i := 0; i < len(deltas); i += n {
		w.Add(deltas[i:min(i+n, len(deltas))])
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEachDeltaCountsOnce: the rows of a known traffic mix give exact
// totals, top-denied order and per-minute usage, whatever repeats the
// deltas on their way: producer copies, spill replays arriving after newer
// deltas, re-deliveries cut into other batches, and an aggregator killed
// after writing but before committing.
func TestEachDeltaCountsOnce(t *testing.T) {
	m := newMix(t, 900, 1)
	ds := m.deltas
	cases := map[string]func(t *testing.T, s Store){
		"once": func(t *testing.T, s Store) { feed(t, writer(t, s), ds, 50) },
		"producer copies": func(t *testing.T, s Store) {
			var twice []*eventsv1.Delta
			for _, d := range ds {
				twice = append(twice, d, d)
			}
			feed(t, writer(t, s), twice, 64)
		},
		"spill replay after newer deltas": func(t *testing.T, s Store) {
			w := writer(t, s)
			feed(t, w, ds, 100)
			feed(t, w, ds[100:400], 37) // the spilled part comes again, late
		},
		"re-delivery with other batch boundaries": func(t *testing.T, s Store) {
			w := writer(t, s)
			feed(t, w, ds[:500], 7)
			feed(t, w, ds[300:], 3)
		},
		"aggregator killed between write and commit": func(t *testing.T, s Store) {
			a := writer(t, s)
			feed(t, a, ds[:600], 100) // written; offsets committed up to 400 only
			b := writer(t, s)         // the partition's next owner starts at the commit
			feed(t, b, ds[400:], 70)
		},
		"all at once, shuffled copies": func(t *testing.T, s Store) {
			all := slices.Concat(ds, ds[200:700])
			rand.New(rand.NewPCG(3, 3)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			feed(t, writer(t, s), all, len(all))
		},
	}
	for name, run := range cases {
		for sname, s := range stores(t) {
			t.Run(name+"/"+sname, func(t *testing.T) {
				run(t, s)
				m.check(t, s)
			})
		}
	}
}

// TestMigrations: migrating twice records each version once; the 18.16
// server refuses a table TTL, which is logged, not fatal.
func TestMigrations(t *testing.T) {
	var log bytes.Buffer
	ch := newCH(t, testsvc.ClickHouse(t), &log)
	ctx := context.Background()
	for range 2 {
		if err := ch.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		ch.migrated = false
	}
	var n uint64
	if err := ch.conn.QueryRow(ctx, "SELECT count() FROM "+ch.db+".schema_migrations FINAL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if int(n) != len(migrations) {
		t.Fatalf("%d migrations recorded, want %d", n, len(migrations))
	}
	var version string
	if err := ch.conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(version, "18.") && !strings.Contains(log.String(), "retention skipped") {
		t.Fatalf("ClickHouse %s: no retention line in the log:\n%s", version, log.String())
	}
	if !strings.Contains(log.String(), "retention") {
		t.Fatalf("retention neither set nor skipped:\n%s", log.String())
	}
}

func TestQueryErrors(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, lim := range []int{0, -1, MaxTopLimit + 1} {
				if _, err := s.TopDenied(ctx, TopQuery{Limit: lim}); err == nil || !strings.HasPrefix(err.Error(), "limit:") {
					t.Errorf("limit %d: %v", lim, err)
				}
			}
			if _, err := s.Usage(ctx, UsageQuery{Descriptor: "user=a"}); err == nil || !strings.HasPrefix(err.Error(), "domain:") {
				t.Errorf("no domain: %v", err)
			}
			if _, err := s.Usage(ctx, UsageQuery{Domain: "api"}); err == nil || !strings.HasPrefix(err.Error(), "key:") {
				t.Errorf("no key: %v", err)
			}
			// values that look like SQL are values
			got, err := s.TopDenied(ctx, TopQuery{Limit: 5, Domain: "api' OR 1=1 --"})
			if err != nil || len(got) != 0 {
				t.Errorf("quoted domain: %v %v", got, err)
			}
		})
	}
	if _, err := NewClickHouse(ClickHouseConfig{Addr: "127.0.0.1:1", Database: "x; DROP"}); err == nil {
		t.Fatal("a database name that is not an identifier was accepted")
	}
}

// TestClickHouseOutage: the writer keeps buffering while ClickHouse is
// stopped (Add never waits), retries, and once the server is back writes
// everything: totals exact, nothing dropped within the bound. A process
// that starts while ClickHouse is down migrates when it returns.
func TestClickHouseOutage(t *testing.T) {
	pc := testsvc.StartPrivateClickHouse(t)
	m := newMix(t, 600, 2)
	ch := newCH(t, pc.Addr, nil)
	var log bytes.Buffer
	w, err := NewWriter(WriterConfig{FlushInterval: 50 * time.Millisecond, MinBackoff: 50 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, WriteTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))}, ch)
	if err != nil {
		t.Fatal(err)
	}
	pc.Stop(t) // down before the first write: not even migrated yet
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	third := len(m.deltas) / 3
	start := time.Now()
	w.Add(m.deltas[:third])
	waitFor(t, "a failed write", func() bool { return w.Stats.WriteErrors.Load() > 0 })
	w.Add(m.deltas[third : 2*third]) // still down: buffered
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Add waited on the store: %v", took)
	}
	pc.Start(t)
	w.Add(m.deltas[2*third:])
	waitFor(t, "the buffer to drain", func() bool { return w.Stats.Rows.Load() == 0 && w.Stats.Written.Load() > 0 })
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.Stats.Dropped.Load() != 0 {
		t.Fatalf("%d rows dropped within the bound", w.Stats.Dropped.Load())
	}
	if !strings.Contains(log.String(), "writing analytics failed") {
		t.Fatalf("the outage was not logged:\n%s", log.String())
	}
	m.check(t, ch)
}

// TestBufferBound: past MaxRows the rows of the oldest minutes go, counted
// and logged; the newest stay.
func TestBufferBound(t *testing.T) {
	var log bytes.Buffer
	mem := NewMemory(0)
	mem.SetClock(func() time.Time { return t0.Add(time.Hour) })
	w, err := NewWriter(WriterConfig{MaxRows: 10, Logger: slog.New(slog.NewTextHandler(&log, nil))}, mem)
	if err != nil {
		t.Fatal(err)
	}
	var ds []*eventsv1.Delta
	for i := range 12 { // 12 rows: minutes 0..3, 3 streams each
		ds = append(ds, &eventsv1.Delta{InstanceId: "c/1", Sequence: uint64(i + 1), Domain: "api", RuleId: "api:user",
			DescriptorText: "user=a", Minute: &eventsv1.MinuteUsage{MinuteUnix: t0.Unix() + int64(i/3)*60, Stream: uint64(i%3 + 1), AllowedCount: 1}})
	}
	w.Add(ds)
	if got := w.Stats.Dropped.Load(); got != 3 || w.Stats.Rows.Load() != 9 {
		t.Fatalf("dropped %d, kept %d; want the 3 rows of the oldest minute dropped", got, w.Stats.Rows.Load())
	}
	if !strings.Contains(log.String(), "analytics buffer full") {
		t.Fatalf("not logged:\n%s", log.String())
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	tl, _ := mem.Timeline(context.Background(), TimelineQuery{Since: t0})
	if len(tl) != 3 || !tl[0].Minute.Equal(t0.Add(time.Minute)) {
		t.Fatalf("timeline after the drop: %+v", tl)
	}
	// A delta without minute usage (an older checker) is skipped, counted.
	w.Add([]*eventsv1.Delta{{InstanceId: "old/1", Sequence: 1}})
	if w.Stats.Skipped.Load() != 1 {
		t.Fatal("a delta without minute usage was not counted as skipped")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling a real server's progress
	}
}

// TestClickHouseCredentials: a password-protected user (the test servers
// have one) migrates, writes and reads; a wrong password is refused with
// the server's message and never appears in it.
func TestClickHouseCredentials(t *testing.T) {
	addr := testsvc.ClickHouse(t)
	ctx := context.Background()
	db := testsvc.Unique("auth")
	ok, err := NewClickHouse(ClickHouseConfig{Addr: addr, Database: db, Username: "velvetrope_auth", Password: "s3cret-for-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if err := ok.Insert(ctx, []Row{{Minute: t0.Unix(), Domain: "api", Rule: "api:k", Descriptor: "k=v", Instance: "c/1", Stream: 1, Version: 1, Denied: 3}}); err != nil {
		t.Fatal(err)
	}
	if top, err := ok.TopDenied(ctx, TopQuery{Since: t0, Limit: 1}); err != nil || len(top) != 1 || top[0].Denied != 3 {
		t.Fatalf("%+v %v", top, err)
	}
	bad, err := NewClickHouse(ClickHouseConfig{Addr: addr, Database: db, Username: "velvetrope_auth", Password: "wrong-password"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Migrate(ctx)
	if err == nil || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("wrong password: %v", err)
	}
	t.Logf("refused as expected: %v", err)
}

// TestNearLive: with the default flush interval, usage is readable within
// 10 s of the aggregator handing it over (in practice about one interval).
func TestNearLive(t *testing.T) {
	ch := newCH(t, testsvc.ClickHouse(t), nil)
	w := writer(t, ch)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	start := time.Now()
	w.Add([]*eventsv1.Delta{{InstanceId: "c/1", Sequence: 1, Domain: "api", RuleId: "api:k", DescriptorText: "k=live",
		Minute: &eventsv1.MinuteUsage{MinuteUnix: time.Now().Unix() / 60 * 60, Stream: 1, DeniedCount: 1}}})
	for {
		top, err := ch.TopDenied(context.Background(), TopQuery{Since: time.Now().Add(-time.Hour), Limit: 1})
		if err == nil && len(top) == 1 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not readable after 10 s (%v)", err)
		}
		time.Sleep(50 * time.Millisecond) // waiting on the real server
	}
	t.Logf("readable after %v (flush interval %v)", time.Since(start).Round(time.Millisecond), w.cfg.FlushInterval)
}

// TestStopWithClickHouseDown: a shutdown never waits on a dead ClickHouse:
// the rows it cannot write are counted as dropped and logged.
func TestStopWithClickHouseDown(t *testing.T) {
	ch, err := NewClickHouse(ClickHouseConfig{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var log bytes.Buffer
	w, err := NewWriter(WriterConfig{MinBackoff: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))}, ch)
	if err != nil {
		t.Fatal(err)
	}
	w.Add(newMix(t, 50, 4).deltas)
	rows := w.Stats.Rows.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if rows == 0 || w.Stats.Dropped.Load() != uint64(rows) || !strings.Contains(log.String(), "lost") {
		t.Fatalf("rows %d, dropped %d, log:\n%s", rows, w.Stats.Dropped.Load(), log.String())
	}
}
