package failure

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/sink"
)

// phase runs the load for d (the scenario's clock: the load generator
// needs real time to send requests).
func phase(d time.Duration) { time.Sleep(d) }

// policyHeld checks the decisions made while the store was out: the async
// rule (failure: open) admitted everything, the sync rule (failure:
// closed) refused everything, and both were answered.
func policyHeld(t *testing.T, l *load, from, to time.Time) {
	t.Helper()
	_, users, usersAllowed := l.tally(between("user_id", from, to))
	_, tenants, tenantsAllowed := l.tally(between("tenant", from, to))
	t.Logf("during the fault: user_id (failure: open) %d of %d admitted; tenant (mode: sync, failure: closed) %d of %d admitted",
		usersAllowed, users, tenantsAllowed, tenants)
	if users == 0 || tenants == 0 {
		t.Fatalf("no decisions during the fault (%d user_id, %d tenant): decisions must continue", users, tenants)
	}
	if usersAllowed != users {
		t.Fatalf("failure: open refused %d of %d requests during the fault", users-usersAllowed, users)
	}
	if tenantsAllowed != 0 {
		t.Fatalf("failure: closed admitted %d of %d requests while the store was out", tenantsAllowed, tenants)
	}
}

// checkerMetric sums a series over both checkers.
func (r *rig) checkerMetric(series string) float64 {
	var n float64
	for _, c := range r.checkers {
		if v := c.metric(series); v > 0 {
			n += v
		}
	}
	return n
}

// TestRedisStoppedThenStarted: Redis goes away for 3 s under load.
func TestRedisStoppedThenStarted(t *testing.T) {
	r := newRig(t, rigOptions{})
	l := r.startLoad(t)
	phase(2 * time.Second)
	r.redis.Stop(t)
	down := time.Now()
	phase(3 * time.Second)
	if code, body := r.checkers[0].get("/readyz"); code != 503 {
		t.Errorf("a checker said ready (%d %s) while Redis was down", code, body)
	}
	up := time.Now()
	r.redis.Start(t)
	phase(2 * time.Second)
	l.halt()
	// the middle of the outage: the first store timeout has passed
	policyHeld(t, l, down.Add(500*time.Millisecond), up)
	admitted, answered, _ := l.tally(all)
	r.converge(t, admitted, workers)
	opens := r.checkerMetric("velvetrope_checker_store_breaker_opens_total")
	degraded := r.checkerMetric("velvetrope_checker_degraded_total")
	t.Logf("answered %d, admitted %d, transport errors %d; breaker opened %v times, %v degraded decisions",
		answered, sum(admitted), l.errors.Load(), opens, degraded)
	if opens < 1 || degraded < 1 {
		t.Fatalf("the metrics did not show the outage: breaker opens %v, degraded %v", opens, degraded)
	}
}

// TestRedisPaused: CLIENT PAUSE holds every Redis client for 3 s.
func TestRedisPaused(t *testing.T) {
	r := newRig(t, rigOptions{})
	l := r.startLoad(t)
	phase(2 * time.Second)
	if err := r.rc.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	phase(3 * time.Second)
	phase(2 * time.Second)
	l.halt()
	policyHeld(t, l, paused.Add(500*time.Millisecond), paused.Add(2500*time.Millisecond))
	admitted, _, _ := l.tally(all)
	r.converge(t, admitted, workers)
	if degraded := r.checkerMetric("velvetrope_checker_degraded_total"); degraded < 1 {
		t.Fatalf("the metrics did not show the pause: %v degraded decisions", degraded)
	}
}

// TestKafkaStoppedThenStarted: the broker goes away for 4 s; the checkers
// spill their deltas and replay them when it returns. (Redis keeps
// answering, but a broker starting takes both cores for a moment: the
// store timeout is long enough that a slow Redis answer then is not read
// as an outage, which is not what this test measures — CI once refused 5
// sync decisions to a 150 ms read timeout; the Redis client's own 100 ms
// timeouts are raised with it, after make test once refused 4 of 256 to a
// read timed out there.)
func TestKafkaStoppedThenStarted(t *testing.T) {
	pk := testsvc.StartPrivateKafka(t)
	r := newRig(t, rigOptions{kafka: pk.Addr, checkerConfig: ", store_timeout: 2s",
		extraConfig: "redis: {read_timeout: 2s, write_timeout: 2s, pool_timeout: 2s}\n"})
	l := r.startLoad(t)
	phase(2 * time.Second)
	pk.Stop(t)
	down := time.Now()
	phase(4 * time.Second)
	up := time.Now()
	pk.Start(t)
	phase(2 * time.Second)
	l.halt()
	_, users, usersAllowed := l.tally(between("user_id", down, up))
	_, tenants, tenantsAllowed := l.tally(between("tenant", down, up))
	t.Logf("during the outage: user_id %d of %d admitted, tenant %d of %d", usersAllowed, users, tenantsAllowed, tenants)
	if users == 0 || usersAllowed != users || tenantsAllowed != tenants {
		t.Fatalf("decisions did not continue while Kafka was down")
	}
	admitted, _, _ := l.tally(all)
	r.converge(t, admitted, 0)
	spilled := r.checkerMetric("velvetrope_producer_spilled_total")
	t.Logf("admitted %d; %v deltas went through the spill files", sum(admitted), spilled)
	if spilled < 1 {
		t.Fatalf("the metrics did not show the outage: nothing spilled")
	}
}

// TestAggregatorKilledMidBatch: kill -9 the aggregator under load, keep
// the load on for 2 s, start a new one.
func TestAggregatorKilledMidBatch(t *testing.T) {
	r := newRig(t, rigOptions{})
	l := r.startLoad(t)
	phase(2 * time.Second)
	r.agg.signal(t, syscall.SIGKILL)
	phase(2 * time.Second)
	r.agg.start(t)
	r.agg.waitReady(t, 60*time.Second)
	phase(time.Second)
	l.halt()
	admitted, _, _ := l.tally(all)
	r.converge(t, admitted, 0)
	applied := r.agg.metric("velvetrope_aggregator_deltas_applied_total")
	skipped := r.agg.metric("velvetrope_aggregator_deltas_skipped_total")
	t.Logf("admitted %d; the new aggregator applied %v deltas (the backlog included) and skipped %v already applied",
		sum(admitted), applied, skipped)
	if applied < 1 {
		t.Fatal("the new aggregator applied nothing")
	}
}

// TestCheckerTerminated: SIGTERM a drained checker: it flushes everything
// it counted before it exits.
func TestCheckerTerminated(t *testing.T) {
	r := newRig(t, rigOptions{})
	l := r.startLoad(t)
	phase(2 * time.Second)
	l.drain(0)
	r.checkers[0].signal(t, syscall.SIGTERM)
	phase(time.Second)
	l.halt()
	admitted, _, _ := l.tally(all)
	r.converge(t, admitted, 0)
}

// TestCheckerKilled: kill -9 a checker under load (50 keys at about 20
// decisions a second each). What it admitted and had not yet handed to
// Kafka is lost: at most what it admitted within one emit latency before
// the kill — for these slow keys up to checker.max_emit_interval, as they
// hold their hits (emission in proportion to need), plus the flush
// interval and the producer's acknowledged write. The bound is read from
// the checker's own velvetrope_checker_emit_latency_seconds histogram (its
// largest observation, to the bucket) just before. A fast key is
// TestCheckerKilledFarKeyHighRate's.
func TestCheckerKilled(t *testing.T) {
	r := newRig(t, rigOptions{})
	l := r.startLoad(t)
	phase(3 * time.Second)
	window := r.checkers[0].histogramMax("velvetrope_checker_emit_latency_seconds") + 50*time.Millisecond
	killed := time.Now()
	r.checkers[0].signal(t, syscall.SIGKILL)
	l.up[0].Store(false)
	phase(time.Second)
	l.halt()
	admitted, _, _ := l.tally(all)
	_, _, recent := l.tally(func(o outcome) bool {
		return o.checker == 0 && o.admitted && o.at.After(killed.Add(-window)) && o.key[0] == 'u'
	})
	// wait until the pipeline has delivered everything it will (the counts
	// stop moving), then compare
	var lost, extra int64
	prev := int64(-1)
	for deadline := time.Now().Add(60 * time.Second); ; {
		lost, extra = 0, 0
		var total int64
		for k, want := range admitted {
			got := r.counted(t, k)
			total += got
			if got < want {
				lost += want - got
			} else {
				extra += got - want
			}
		}
		if total == prev || time.Now().After(deadline) {
			break
		}
		prev = total
		time.Sleep(time.Second) // waiting for the real pipeline
	}
	t.Logf("kill -9: %d admitted hits missing from Redis; the killed checker admitted %d async hits in the %v before the kill "+
		"(its largest emit latency + 50 ms); %d counted beyond the answers (requests in flight at the kill)", lost, recent, window, extra)
	if lost > recent {
		t.Fatalf("lost %d hits, more than the %d admitted in the last %v", lost, recent, window)
	}
	if extra > workers {
		t.Fatalf("%d hits counted beyond what was answered, more than the %d requests that can be in flight", extra, workers)
	}
}

// TestClickHouseStoppedThenStarted: the analytics store goes away for 4 s;
// decisions and counters never notice, and once it is back the usage rows
// hold every decision (allowed and denied per rule), once.
func TestClickHouseStoppedThenStarted(t *testing.T) {
	pc := testsvc.StartPrivateClickHouse(t)
	r := newRig(t, rigOptions{clickhouse: pc.Addr})
	l := r.startLoad(t)
	phase(2 * time.Second)
	pc.Stop(t)
	phase(4 * time.Second)
	pc.Start(t)
	phase(time.Second)
	l.halt()
	admitted, answered, _ := l.tally(all)
	r.converge(t, admitted, 0)
	_, users, usersAllowed := l.tally(func(o outcome) bool { return o.key[0] == 'u' })
	_, tenants, tenantsAllowed := l.tally(func(o outcome) bool { return o.key[0] == 't' })
	ch, err := sink.NewClickHouse(sink.ClickHouseConfig{Addr: pc.Addr, Database: r.db})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	want := map[string][2]uint64{"api:user_id": {uint64(usersAllowed), uint64(users - usersAllowed)},
		"api:tenant": {uint64(tenantsAllowed), uint64(tenants - tenantsAllowed)}}
	var got map[string][2]uint64
	for deadline := time.Now().Add(60 * time.Second); ; {
		rows, err := ch.Rules(context.Background(), sink.RulesQuery{Since: r.start.Add(-time.Minute)})
		got = map[string][2]uint64{}
		if err == nil {
			for _, row := range rows {
				got[row.Rule] = [2]uint64{row.Allowed, row.Denied}
			}
		}
		if got["api:user_id"] == want["api:user_id"] && got["api:tenant"] == want["api:tenant"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("analytics after the outage: %v (err %v), want %v (allowed, denied) per rule", got, err, want)
		}
		time.Sleep(500 * time.Millisecond) // waiting for the writer's retry
	}
	errs := r.agg.metric("velvetrope_sink_write_errors_total")
	t.Logf("answered %d; ClickHouse holds %v (allowed, denied) per rule; %v failed writes were retried", answered, got, errs)
	if errs < 1 {
		t.Fatal("the metrics did not show the outage: no failed analytics write")
	}
}
