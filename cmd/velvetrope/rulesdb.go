package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/admin"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/rulestore"
	"github.com/velvetrope/velvetrope/rulesync"
)

// rulesDB is a process's rules database: the store (nil: rule files only)
// and the follower that keeps the live rules on it.
type rulesDB struct {
	store    *rulestore.Store
	follower *rulesync.Follower
	sources  *rulesync.Sources
	// plans are the client tables the checker reads, kept by clients
	// (both nil without a store)
	plans   *plantable.Tables
	clients *rulesync.Clients
}

// cacheFileName is the follower's cache in checker.state_dir.
const cacheFileName = "rules-store.json"

// newRulesDB opens rules_store's backend and follows it (started in the
// stage of the clients, so the store's rules are live before the
// listeners open).
func newRulesDB(sd *shutdown, app config.App, rules *config.Store, src *rulesync.Sources, logger *slog.Logger, reg *metrics.Registry) (*rulesDB, error) {
	cfg := app.RulesStore
	db := &rulesDB{sources: src}
	opts := rulestore.Options{History: cfg.History, MaxBodyBytes: cfg.MaxDocumentBytes}
	fopts := rulesync.FollowerOptions{Poll: cfg.Poll, Logger: logger}
	var err error
	switch cfg.Backend {
	case "":
		return db, nil
	case "memory":
		db.store, err = rulestore.NewMemory(opts)
	case "redis":
		var c redis.UniversalClient
		if c, err = rulesRedis(sd, app); err != nil {
			return nil, err
		}
		db.store, err = rulestore.NewRedis(c, "vr", opts)
		dir, derr := config.ResolveStateDir(app.Checker.StateDir, nil)
		if derr != nil {
			return nil, staged("rules store", derr)
		}
		fopts.CacheFile = filepath.Join(dir, cacheFileName)
	}
	if err != nil {
		return nil, staged("rules store", err)
	}
	db.follower = rulesync.NewFollower(db.store, src, fopts)
	sd.hook(stopClients, "rules store", func(ctx context.Context) error {
		return staged("rules store", db.follower.Start(ctx))
	}, db.follower.Stop)
	db.plans = &plantable.Tables{}
	db.clients = rulesync.NewClients(db.store, rules, db.plans, rulesync.ClientsOptions{Logger: logger})
	sd.hook(stopClients, "client tables", db.clients.Start, db.clients.Stop)
	db.register(reg)
	return db, nil
}

// rulesRedis is the rules store's client: rules_store.redis_addrs, or the
// counters' Redis. Unlike the counters' client it is not pinged at start:
// a checker whose rules store is down starts from its cache file.
func rulesRedis(sd *shutdown, app config.App) (redis.UniversalClient, error) {
	addrs := app.RulesStore.RedisAddrs
	if len(addrs) == 0 {
		addrs = app.Redis.Addrs
	}
	if len(addrs) == 0 {
		return nil, staged("rules store", errors.New("rules_store.backend is redis but no address: set rules_store.redis_addrs or redis.addrs (VELVETROPE_REDIS_ADDRS)"))
	}
	tlsCfg, err := tlsconf.Client(app.Redis.TLS, "redis.tls")
	if err != nil {
		return nil, staged("rules store", err)
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, Username: app.Redis.Username,
		Password: app.Redis.Password, DB: app.Redis.DB, ClientName: "velvetrope-rules-" + app.InstanceID, TLSConfig: tlsCfg,
		DialTimeout: app.Redis.DialTimeout, ReadTimeout: app.Aggregator.RedisTimeout, WriteTimeout: app.Aggregator.RedisTimeout})
	sd.stop(stopClients, "rules store redis", func(context.Context) error { return c.Close() })
	return c, nil
}

func (db *rulesDB) register(reg *metrics.Registry) {
	reg.Labeled("velvetrope_rules_version", "The rules store's version live here, per domain kept in the store.", "gauge", "domain",
		func() map[string]float64 {
			out := map[string]float64{}
			for d, v := range db.sources.Live() {
				out[d] = float64(v.Version)
			}
			return out
		})
	reg.Labeled("velvetrope_rules_staged_version", "The rules store's version staged here in shadow, per domain with one (the live rules are its live_version's).", "gauge", "domain",
		func() map[string]float64 {
			out := map[string]float64{}
			for d, v := range db.sources.Live() {
				if v.Stage != "" {
					out[d] = float64(v.Version)
				}
			}
			return out
		})
	reg.Gauge("velvetrope_rules_age_seconds", "Seconds since the rules store was last read in full (-1: not since start; the rules are the cache file's).",
		func() float64 {
			age, ok := db.follower.Age()
			if !ok {
				return -1
			}
			return age.Seconds()
		})
	reg.Counter("velvetrope_rules_versions_applied_total", "Rules store versions made live here.", func() float64 {
		a, _ := db.follower.Counts()
		return float64(a)
	})
	tables := func(v func(rulesync.TableStatus) float64) func() map[string]float64 {
		return func() map[string]float64 {
			out := map[string]float64{}
			for _, st := range db.clients.Status() {
				out[st.Domain+"/"+st.Table] = v(st)
			}
			return out
		}
	}
	reg.Labeled("velvetrope_client_plans_clients", "Clients with a plan in each client table held here (domain/table).", "gauge", "table",
		tables(func(st rulesync.TableStatus) float64 { return float64(st.Clients) }))
	reg.Labeled("velvetrope_client_plans_bytes", "Memory each client table held here takes (10 bytes a place).", "gauge", "table",
		tables(func(st rulesync.TableStatus) float64 { return float64(st.Bytes) }))
	reg.Labeled("velvetrope_client_plans_age_seconds", "Seconds since each client table was last read from the rules store (-1: never).", "gauge", "table",
		tables(func(st rulesync.TableStatus) float64 {
			if st.Age < 0 {
				return -1
			}
			return st.Age.Seconds()
		}))
	reg.Labeled("velvetrope_client_plans_scans_total", "Whole reads of each client table (one at start; more when its log left this checker behind).", "counter", "table",
		tables(func(st rulesync.TableStatus) float64 { return float64(st.Scans) }))
	reg.Counter("velvetrope_rules_versions_refused_total", "Rules store versions refused here (they did not compile with the live rules; the domain's rules before them stayed).",
		func() float64 {
			_, r := db.follower.Counts()
			return float64(r)
		})
}

// ready says why the store's rules are not to be trusted (nil without a
// store).
func (db *rulesDB) ready(app config.App) error {
	if db.follower == nil {
		return nil
	}
	if err := db.follower.Ready(app.RulesStore.MaxAge); err != nil {
		return err
	}
	return db.clients.Ready()
}

// adminDB is what the admin endpoints act on; nil without a store.
func (db *rulesDB) adminDB(app config.App) *admin.RulesDB {
	if db.store == nil {
		return nil
	}
	return &admin.RulesDB{Store: db.store, Sources: db.sources,
		Apply: func(ctx context.Context, domain string) {
			db.follower.SyncDomain(ctx, domain)
			db.clients.Kick() // a new rule's table is followed now, not at the next tick
		},
		ClientsApplied: db.clients.WaitSeq, Plans: db.plans, MaxDocumentBytes: int64(app.RulesStore.MaxDocumentBytes)}
}
