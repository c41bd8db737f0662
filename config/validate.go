package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

type problem struct{ field, msg string }

// Validate reports every invalid setting by its key path, as an
// [ErrorList]; [LoadApp] also says where each value came from.
func (a App) Validate() error {
	var errs ErrorList
	for _, p := range a.problems() {
		errs = append(errs, &Error{Key: p.field, Msg: p.msg})
	}
	return errs.err()
}

func (a App) problems() []problem {
	var errs []problem
	bad := func(field, format string, args ...any) {
		errs = append(errs, problem{field, fmt.Sprintf(format, args...)})
	}
	if a.InstanceID == "" || len(a.InstanceID) > 200 || strings.ContainsAny(a.InstanceID, " \t\n/|") {
		bad("instance_id", "must be 1 to 200 bytes without spaces, '/' or '|', got %q", a.InstanceID)
	}
	if p, ok := a.Limits.problem(); ok {
		bad("limits."+p.field, "%s", p.msg)
	}
	if a.RulesReload <= 0 {
		bad("rules_reload", "must be > 0, got %v", a.RulesReload)
	}
	switch x := a.XDS; {
	case x.ConfigType != "" && x.ConfigType != "FILE" && x.ConfigType != "GRPC_XDS_SOTW":
		bad("xds.config_type", `want FILE or GRPC_XDS_SOTW (Envoy's ratelimit service's CONFIG_TYPE), got %q`, x.ConfigType)
	case x.badUseTLS != "":
		bad("xds.tls.enabled", "want true or false, got %q", x.badUseTLS)
	case x.XDSOn() && x.NodeID == "":
		bad("xds.node_id", "required with GRPC_XDS_SOTW (CONFIG_GRPC_XDS_NODE_ID): the name this process gives the control plane")
	case x.XDSOn():
		if _, port, err := net.SplitHostPort(x.ServerURL); err != nil || port == "" {
			bad("xds.server_url", "want the control plane's host:port with GRPC_XDS_SOTW (CONFIG_GRPC_XDS_SERVER_URL), got %q", x.ServerURL)
		}
	}
	switch rs := a.RulesStore; {
	case rs.Backend != "" && rs.Backend != "redis" && rs.Backend != "memory":
		bad("rules_store.backend", `want "redis", "memory" or nothing (rule files only), got %q`, rs.Backend)
	case rs.History < 1 || rs.History > 10000:
		bad("rules_store.history", "must be between 1 and 10000, got %d", rs.History)
	case rs.Poll < 10*time.Millisecond || rs.Poll > time.Hour:
		bad("rules_store.poll", "must be between 10ms and 1h, got %v", rs.Poll)
	case rs.MaxAge < 0 || (rs.MaxAge > 0 && rs.MaxAge < rs.Poll):
		bad("rules_store.max_age", "must be 0 (no bound) or at least rules_store.poll (%v), got %v", rs.Poll, rs.MaxAge)
	case rs.MaxDocumentBytes < 1024 || rs.MaxDocumentBytes > MaxRuleFileBytes:
		bad("rules_store.max_document_bytes", "must be between 1 KiB and the rule file bound, 4 MiB (1024 to %d), got %d", MaxRuleFileBytes, rs.MaxDocumentBytes)
	}
	// A bearer token travels in a header: HTTP clients and servers trim
	// the blanks around it and cannot carry control characters, so such
	// a token can never match and would lock the endpoints out in
	// silence. (Tokens are never echoed, not even here.)
	toks := []struct{ field, v string }{{"admin.token", a.Admin.Token}, {"analytics.token", a.Analytics.Token}}
	names := map[string]string{}
	if a.Admin.Token != "" {
		names[AdminTokenName] = "admin.token"
	}
	for i, nt := range a.Admin.Tokens {
		field := fmt.Sprintf("admin.tokens[%d]", i)
		toks = append(toks, struct{ field, v string }{field + ".token", nt.Token})
		switch {
		case nt.Token == "":
			bad(field+".token", "must not be empty")
		case nt.Token == a.Admin.Token:
			bad(field+".token", "is admin.token's: each holder needs a token of its own, or the changes cannot be told apart")
		}
		if nt.Name == "" || len(nt.Name) > 64 || strings.ContainsFunc(nt.Name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '@')
		}) {
			bad(field+".name", "want 1 to 64 of a-z, A-Z, 0-9 and - _ . @ (it is recorded as the author of changes), got %q", nt.Name)
		} else if prev, dup := names[nt.Name]; dup {
			bad(field+".name", "%q is already the name of %s", nt.Name, prev)
		} else {
			names[nt.Name] = field
		}
		for j := range i {
			if a.Admin.Tokens[j].Token == nt.Token && nt.Token != "" {
				bad(field+".token", "is also admin.tokens[%d]'s: each holder needs a token of its own", j)
			}
		}
	}
	for _, tok := range toks {
		if tok.v == "" {
			continue
		}
		if strings.TrimSpace(tok.v) != tok.v || strings.ContainsFunc(tok.v, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			bad(tok.field, "must be printable ASCII without spaces (a bearer token in an HTTP header), got %d bytes that are not", len(tok.v))
		}
	}
	checkAddr := func(field, addr string, allowEmpty bool) {
		if addr == "" && allowEmpty {
			return
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			bad(field, "want host:port, got %q (%v)", addr, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad(field, "want host:port with a port from 0 to 65535, got %q", addr)
		}
	}
	checkAddr("http.addr", a.HTTP.Addr, false)
	checkAddr("grpc.addr", a.GRPC.Addr, true)
	checkAddr("debug.pprof_addr", a.Debug.PprofAddr, true)
	for i, r := range a.Redis.Addrs {
		checkAddr(fmt.Sprintf("redis.addrs[%d]", i), r, false)
	}
	for i, b := range a.Kafka.Brokers {
		checkAddr(fmt.Sprintf("kafka.brokers[%d]", i), b, false)
	}
	checkAddr("clickhouse.addr", a.ClickHouse.Addr, true)
	for _, l := range []struct {
		field string
		t     ClientTLS
	}{{"redis.tls", a.Redis.TLS}, {"kafka.tls", a.Kafka.TLS}, {"clickhouse.tls", a.ClickHouse.TLS}} {
		if t := l.t; (t.CertFile == "") != (t.KeyFile == "") {
			bad(l.field, "cert_file and key_file go together")
		} else if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "") {
			bad(l.field, "files or server_name are set but enabled is false")
		}
	}
	switch m := a.Kafka.SASL.Mechanism; m {
	case "", "plain", "scram-sha-256", "scram-sha-512":
		if m != "" && a.Kafka.SASL.Username == "" {
			bad("kafka.sasl.username", "must not be empty with mechanism %s", m)
		}
	default:
		bad("kafka.sasl.mechanism", "want plain, scram-sha-256 or scram-sha-512, got %q", m)
	}
	for _, l := range []struct {
		field string
		t     TLSConfig
	}{{"http.tls", a.HTTP.TLS}, {"grpc.tls", a.GRPC.TLS}} {
		field, t := l.field, l.t
		switch {
		case (t.CertFile == "") != (t.KeyFile == ""):
			bad(field, "cert_file and key_file go together")
		case t.ClientCAFile != "" && t.CertFile == "":
			bad(field, "client_ca_file needs cert_file and key_file")
		}
	}
	if an := a.Analytics; an.MaxWindow < time.Minute || an.MaxWindow > 31*24*time.Hour || an.MaxConcurrent < 1 || an.MaxConcurrent > 256 {
		bad("analytics.max_window/max_concurrent", "want 1m <= max_window <= 744h (31 days) and 1 <= max_concurrent <= 256, got %v and %d",
			an.MaxWindow, an.MaxConcurrent)
	}
	if a.Analytics.MemoryMaxBytes < 1<<20 {
		bad("analytics.memory_max_bytes", "must be at least 1 MiB, got %d", a.Analytics.MemoryMaxBytes)
	}
	if a.HTTP.MaxBodyBytes <= 0 || a.HTTP.MaxBodyBytes > 1<<30 {
		bad("http.max_body_bytes", "must be between 1 and 1 GiB (1073741824), got %d", a.HTTP.MaxBodyBytes)
	} else if a.HTTP.MaxBodyBytesInFlight < a.HTTP.MaxBodyBytes || a.HTTP.MaxBodyBytesInFlight > 1<<40 {
		bad("http.max_body_bytes_in_flight/max_body_bytes", "want max_body_bytes <= max_body_bytes_in_flight <= 1 TiB, got %d and %d", a.HTTP.MaxBodyBytesInFlight, a.HTTP.MaxBodyBytes)
	}
	if a.HTTP.ReadTimeout <= 0 || a.HTTP.WriteTimeout <= 0 {
		bad("http.read_timeout/write_timeout", "must be > 0")
	}
	if a.HTTP.MaxInFlight < 1 || a.HTTP.MaxInFlight > 1_000_000 {
		bad("http.max_in_flight", "must be between 1 and 1000000, got %d", a.HTTP.MaxInFlight)
	}
	if a.GRPC.MaxConcurrentStreams < 1 || a.GRPC.MaxConcurrentStreams > 1_000_000 {
		bad("grpc.max_concurrent_streams", "must be between 1 and 1000000, got %d", a.GRPC.MaxConcurrentStreams)
	}
	if a.GRPC.CallTimeout < time.Millisecond || a.GRPC.CallTimeout > time.Hour {
		bad("grpc.call_timeout", "must be in [1ms, 1h], got %v", a.GRPC.CallTimeout)
	}
	if a.Kafka.Topic == "" {
		bad("kafka.topic", "must not be empty")
	}
	if !chIdentifier.MatchString(a.ClickHouse.Database) {
		bad("clickhouse.database", "want letters, digits and _ (not starting with a digit), got %q", a.ClickHouse.Database)
	}
	if ch := a.ClickHouse; ch.RetentionDays < 0 || ch.FlushInterval <= 0 || ch.FlushInterval > time.Minute || ch.MaxRows < 1000 {
		bad("clickhouse.retention_days/flush_interval/max_buffered_rows",
			"want retention_days >= 0, 0 < flush_interval <= 1m, max_buffered_rows >= 1000; got %d, %v, %d",
			ch.RetentionDays, ch.FlushInterval, ch.MaxRows)
	}
	if a.Limiter.MaxKeys < 64 {
		bad("limiter.max_keys", "must be at least 64, got %d", a.Limiter.MaxKeys)
	}
	if a.Limiter.IdempotencyTTL < 0 {
		bad("limiter.idempotency_ttl", "must not be negative")
	}
	switch a.Kafka.Compression {
	case "lz4", "zstd", "snappy", "gzip", "none":
	default:
		bad("kafka.compression", "want lz4, zstd, snappy, gzip or none, got %q", a.Kafka.Compression)
	}
	ck := a.Checker
	switch {
	case ck.MaxKeys < 256:
		bad("checker.max_keys", "must be at least 256, got %d", ck.MaxKeys)
	case ck.MaxBytes < 0 || (ck.MaxBytes > 0 && ck.MaxBytes < 256*1024):
		bad("checker.max_bytes", "must be 0 (no bound in bytes) or at least 256KiB, got %d", ck.MaxBytes)
	case ck.FlushInterval <= 0 || ck.FlushInterval > time.Minute:
		bad("checker.flush_interval", "must be in (0, 1m], got %v", ck.FlushInterval)
	case ck.MaxEmitInterval < ck.FlushInterval || ck.MaxEmitInterval > time.Minute:
		bad("checker.max_emit_interval/flush_interval", "want flush_interval <= max_emit_interval <= 1m, got %v and %v", ck.MaxEmitInterval, ck.FlushInterval)
	case ck.MaxHeldHits < 1 || ck.MaxHeldTotal < ck.MaxHeldHits:
		bad("checker.max_held_hits/max_held_hits_total", "want 1 <= max_held_hits <= max_held_hits_total, got %d and %d", ck.MaxHeldHits, ck.MaxHeldTotal)
	case ck.Heartbeat <= 0 || ck.InstanceTTL < ck.Heartbeat:
		bad("checker.heartbeat/instance_ttl", "want 0 < heartbeat <= instance_ttl, got %v and %v", ck.Heartbeat, ck.InstanceTTL)
	case ck.MaxClockSkew <= 0:
		bad("checker.max_clock_skew", "must be > 0, got %v", ck.MaxClockSkew)
	case ck.MinRefresh <= 0 || ck.MaxRefresh < ck.MinRefresh:
		bad("checker.min_refresh/max_refresh", "want 0 < min_refresh <= max_refresh, got %v and %v", ck.MinRefresh, ck.MaxRefresh)
	case ck.PipelineLag < 0:
		bad("checker.pipeline_lag", "must not be negative")
	case ck.FlushInterval > ck.PipelineLag:
		bad("checker.flush_interval/pipeline_lag", "want flush_interval <= pipeline_lag (the lag includes the flush), got %v and %v", ck.FlushInterval, ck.PipelineLag)
	case ck.SafetyPercent < 100:
		bad("checker.safety_percent", "must be at least 100, got %d", ck.SafetyPercent)
	case ck.NearFloor < 1 || ck.NearFloorPct < 0 || ck.NearFloorPct > 100:
		bad("checker.near_floor/near_floor_percent", "want near_floor >= 1 and 0 <= near_floor_percent <= 100")
	case ck.IdleAfter <= 0:
		bad("checker.idle_after", "must be > 0")
	case ck.ControlPoll < 10*time.Millisecond || ck.ControlPoll > time.Hour:
		bad("checker.control_poll", "must be in [10ms, 1h], got %v", ck.ControlPoll)
	case ck.SpillMaxBytes < 1<<20:
		bad("checker.spill_max_bytes", "must be at least 1 MiB, got %d", ck.SpillMaxBytes)
	case ck.TopicPartitions < 1:
		bad("checker.topic_partitions", "must be >= 1")
	case ck.StoreTimeout < time.Millisecond || ck.StoreTimeout > 10*time.Second:
		bad("checker.store_timeout", "must be in [1ms, 10s], got %v", ck.StoreTimeout)
	case ck.BreakerFailures < 1 || ck.BreakerOpenFor < 10*time.Millisecond:
		bad("checker.breaker_failures/breaker_open_for", "want breaker_failures >= 1 and breaker_open_for >= 10ms, got %d and %v",
			ck.BreakerFailures, ck.BreakerOpenFor)
	}
	if r := a.Redis; r.DialTimeout <= 0 || r.ReadTimeout <= 0 || r.WriteTimeout <= 0 || r.PoolTimeout <= 0 {
		bad("redis.dial_timeout/read_timeout/write_timeout/pool_timeout", "must all be > 0")
	}
	ag := a.Aggregator
	switch {
	case ag.Group == "":
		bad("aggregator.group", "must not be empty")
	case ag.BatchSize < 1 || ag.BatchSize > 100_000:
		bad("aggregator.batch_size", "must be between 1 and 100000, got %d", ag.BatchSize)
	case ag.BatchWait <= 0:
		bad("aggregator.batch_wait", "must be > 0")
	case ag.HeartbeatInterval <= 0 || ag.SessionTimeout < 3*ag.HeartbeatInterval:
		bad("aggregator.session_timeout/heartbeat_interval", "want heartbeat_interval > 0 and session_timeout >= 3 × heartbeat_interval, got %v and %v",
			ag.HeartbeatInterval, ag.SessionTimeout)
	case ag.RebalanceTimeout <= 0:
		bad("aggregator.rebalance_timeout", "must be > 0")
	case ag.RedisTimeout <= 0:
		bad("aggregator.redis_timeout", "must be > 0")
	}
	df := a.Deferred
	switch {
	case df.Group == "":
		bad("deferred.group", "must not be empty")
	case df.Workers < 1 || df.Workers > 4096:
		bad("deferred.workers", "must be between 1 and 4096, got %d", df.Workers)
	case df.MaxInFlight < 1 || df.MaxInFlight > 1_000_000:
		bad("deferred.max_in_flight", "must be between 1 and 1000000, got %d", df.MaxInFlight)
	case df.DeliveryTimeout < time.Millisecond:
		bad("deferred.delivery_timeout", "must be >= 1ms, got %v", df.DeliveryTimeout)
	case df.BackoffMin < time.Millisecond || df.BackoffMax < df.BackoffMin:
		bad("deferred.backoff_min/backoff_max", "want backoff_min >= 1ms and backoff_max >= backoff_min, got %v and %v", df.BackoffMin, df.BackoffMax)
	case df.StateRetention < time.Minute:
		bad("deferred.state_retention", "must be >= 1m, got %v", df.StateRetention)
	case df.MaxBytes < 1<<20 || df.MaxBytes > 1<<40:
		bad("deferred.max_bytes", "must be between 1 MiB and 1 TiB (%d to %d), got %d", 1<<20, int64(1)<<40, df.MaxBytes)
	}
	if a.Kafka.DeferredTopic == "" {
		bad("kafka.deferred_topic", "must not be empty")
	}
	return errs
}
