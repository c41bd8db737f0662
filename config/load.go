package config

import (
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envVar is an environment override: the variable, the key path it sets
// (errors about that setting name the variable), and how.
type envVar struct {
	name, key string
	set       func(a *App, v string)
}

// envList splits a comma-separated variable, dropping empty items.
func envList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var envVars = []envVar{
	{"VELVETROPE_INSTANCE_ID", "instance_id", func(a *App, v string) { a.InstanceID = v }},
	{"VELVETROPE_RULES", "rules", func(a *App, v string) { a.Rules = envList(v) }},
	{"VELVETROPE_HTTP_ADDR", "http.addr", func(a *App, v string) { a.HTTP.Addr = v }},
	{"VELVETROPE_GRPC_ADDR", "grpc.addr", func(a *App, v string) { a.GRPC.Addr = v }},
	{"VELVETROPE_REDIS_ADDRS", "redis.addrs", func(a *App, v string) { a.Redis.Addrs = envList(v) }},
	{"VELVETROPE_REDIS_PASSWORD", "redis.password", func(a *App, v string) { a.Redis.Password = v }},
	{"VELVETROPE_KAFKA_BROKERS", "kafka.brokers", func(a *App, v string) { a.Kafka.Brokers = envList(v) }},
	{"VELVETROPE_CLICKHOUSE_ADDR", "clickhouse.addr", func(a *App, v string) { a.ClickHouse.Addr = v }},
	{"VELVETROPE_ADMIN_TOKEN", "admin.token", func(a *App, v string) { a.Admin.Token = v }},
	{"VELVETROPE_ADMIN_TOKENS", "admin.tokens", func(a *App, v string) { a.Admin.Tokens = envNamedTokens(v) }},
	{"VELVETROPE_HASH_KEY", "checker.hash_key", func(a *App, v string) { a.Checker.HashKey = v }},
	{"VELVETROPE_KAFKA_SASL_PASSWORD", "kafka.sasl.password", func(a *App, v string) { a.Kafka.SASL.Password = v }},
	{"VELVETROPE_CLICKHOUSE_PASSWORD", "clickhouse.password", func(a *App, v string) { a.ClickHouse.Password = v }},
	{"VELVETROPE_ANALYTICS_TOKEN", "analytics.token", func(a *App, v string) { a.Analytics.Token = v }},
	{"VELVETROPE_STATE_DIR", "checker.state_dir", func(a *App, v string) { a.Checker.StateDir = v }},
	{"VELVETROPE_PPROF_ADDR", "debug.pprof_addr", func(a *App, v string) { a.Debug.PprofAddr = v }},
	{"VELVETROPE_RULES_STORE", "rules_store.backend", func(a *App, v string) { a.RulesStore.Backend = v }},
	{"CONFIG_TYPE", "xds.config_type", func(a *App, v string) { a.XDS.ConfigType = v }},
	{"CONFIG_GRPC_XDS_SERVER_URL", "xds.server_url", func(a *App, v string) { a.XDS.ServerURL = v }},
	{"CONFIG_GRPC_XDS_NODE_ID", "xds.node_id", func(a *App, v string) { a.XDS.NodeID = v }},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "xds.tls.enabled", func(a *App, v string) {
		if b, err := strconv.ParseBool(v); err == nil {
			a.XDS.TLS.Enabled, a.XDS.badUseTLS = b, ""
		} else {
			a.XDS.badUseTLS = v
		}
	}},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds.tls.cert_file", func(a *App, v string) { a.XDS.TLS.CertFile = v }},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds.tls.key_file", func(a *App, v string) { a.XDS.TLS.KeyFile = v }},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds.tls.ca_file", func(a *App, v string) { a.XDS.TLS.CAFile = v }},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.tls.server_name", func(a *App, v string) { a.XDS.TLS.ServerName = v }},
	{"VELVETROPE_RULES_STORE_REDIS_ADDRS", "rules_store.redis_addrs", func(a *App, v string) { a.RulesStore.RedisAddrs = envList(v) }},
}

// Env lists the environment overrides, applied after the file.
var Env = func() []string {
	names := make([]string, len(envVars))
	for i, e := range envVars {
		names[i] = e.name
	}
	return names
}()

// Override is a value set over the file and the environment, such as a
// command-line flag: Set sets the setting at Key (a key path, http.addr),
// and an error about that setting names From (--http) as its origin.
type Override struct {
	Key, From string
	Set       func(*App)
}

// LoadApp reads the YAML file at path (none when path is ""), applies the
// environment overrides read through getenv (os.LookupEnv in production),
// then overrides, and validates the result. Every problem is reported, as
// an [ErrorList] of [*Error]: each names the setting's key path and where
// its value came from: the file's FILE:LINE:COLUMN, the environment
// variable, or the override's From.
func LoadApp(path string, getenv func(string) (string, bool), overrides ...Override) (App, error) {
	a := DefaultApp()
	o := origins{file: path, env: map[string]string{}, flags: map[string]string{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return a, ErrorList{&Error{File: path, Msg: pathErrorMsg(path, err)}}
		}
		keys, errs := decodeAppFile(path, data, &a)
		if len(errs) > 0 {
			return a, errs
		}
		o.keys = keys
	}
	if getenv == nil {
		getenv = os.LookupEnv
	}
	for _, e := range envVars {
		if v, ok := getenv(e.name); ok {
			e.set(&a, v)
			o.env[e.key] = e.name
		}
	}
	for _, ov := range overrides {
		ov.Set(&a)
		o.flags[ov.Key] = ov.From
	}
	var errs ErrorList
	for _, p := range a.problems() {
		e := &Error{Key: p.field, Msg: p.msg}
		o.locate(e, settingKeys(p.field))
		errs = append(errs, e)
	}
	return a, errs.err()
}

// origins records where the loaded settings came from.
type origins struct {
	file  string
	keys  map[string]*yaml.Node // key path → its key in the file
	env   map[string]string     // key path → the variable that set it
	flags map[string]string     // key path → the override that set it
}

// locate sets where e's value came from, the first of keys to have an
// origin: an override or a variable that set the key or a section above
// it (they replace the file's value), else the file's line of the key,
// else, for a setting the file leaves at its default, the file's line of
// the nearest section above it.
func (o origins) locate(e *Error, keys []string) {
	for _, k := range keys {
		for p := k; p != ""; p = parentKey(p) {
			if from, ok := o.flags[p]; ok {
				e.Source = from
				return
			}
			if from, ok := o.env[p]; ok {
				e.Source = from
				return
			}
		}
		if n, ok := o.keys[k]; ok {
			e.File, e.Line, e.Column = o.file, n.Line, n.Column
			return
		}
	}
	for _, k := range keys {
		for p := parentKey(k); p != ""; p = parentKey(p) {
			if n, ok := o.keys[p]; ok {
				e.File, e.Line, e.Column = o.file, n.Line, n.Column
				return
			}
		}
	}
}

// parentKey is the key path above k: "redis" for "redis.addrs",
// "redis.addrs" for "redis.addrs[1]", "" at the top.
func parentKey(k string) string {
	if i := strings.LastIndexAny(k, ".["); i >= 0 {
		return k[:i]
	}
	return ""
}

// settingKeys are the key paths a problem's field names: one
// ("http.addr"), or several siblings written as one
// ("checker.heartbeat/instance_ttl").
func settingKeys(field string) []string {
	parts := strings.Split(field, "/")
	section := parentKey(parts[0])
	keys := []string{parts[0]}
	for _, p := range parts[1:] {
		if section != "" {
			p = section + "." + p
		}
		keys = append(keys, p)
	}
	return keys
}

// problem is one invalid setting: the key path (or sibling paths, see
// settingKeys) and what is wrong.

// envNamedTokens reads NAME=TOKEN[,NAME=TOKEN...]; an entry without "="
// is kept with no name, for validation to name it.
func envNamedTokens(v string) []NamedToken {
	var out []NamedToken
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, tok, ok := strings.Cut(e, "=")
		if !ok {
			name, tok = "", e
		}
		out = append(out, NamedToken{Name: name, Token: tok})
	}
	return out
}
