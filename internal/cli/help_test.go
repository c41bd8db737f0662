package cli

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// commands are the subcommands as typed.
var commands = []string{"dev", "checker", "aggregator", "drain", "check", "top", "bench", "rules validate", "version"}

// processes are the subcommands that run until stopped.
var processes = []string{"dev", "checker", "aggregator", "drain"}

var (
	flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)\b`)
	envLine  = regexp.MustCompile(`(?m)^  (VELVETROPE_[A-Z0-9_]+)\s`)
)

// help is what `velvetrope CMD --help` says: its flags and variables.
type help struct {
	text  string
	flags []string
	env   []string
}

func readHelp(t *testing.T, cmd string) help {
	t.Helper()
	r := runBin(t, env(), append(strings.Fields(cmd), "--help")...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: velvetrope "+cmd) || r.stderr != "" {
		t.Fatalf("velvetrope %s --help: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0, the usage on stdout, nothing on stderr",
			cmd, r.code, r.stdout, r.stderr)
	}
	h := help{text: r.stdout}
	for _, m := range flagLine.FindAllStringSubmatch(r.stdout, -1) {
		h.flags = append(h.flags, m[1])
	}
	for _, m := range envLine.FindAllStringSubmatch(r.stdout, -1) {
		h.env = append(h.env, m[1])
	}
	return h
}

// codeVariables is every VELVETROPE_* variable the binary's own code
// names: each string literal that is exactly such a name, in the
// non-test files of the module's packages the binary is built from
// (go list -deps), except the usage text that lists them
// (cmd/velvetrope/usage.go). The config reads them (os.LookupEnv through
// config.LoadApp), top reads one itself; nothing else in the binary
// spells a whole variable name, so a new variable cannot go unlisted.
func codeVariables(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,Module", "github.com/velvetrope/velvetrope/cmd/velvetrope").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	name := regexp.MustCompile(`^VELVETROPE_[A-Z0-9_]+$`)
	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	fset := token.NewFileSet()
	for dec.More() {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
			Module          *struct{ Path string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != "github.com/velvetrope/velvetrope" {
			continue
		}
		for _, f := range p.GoFiles {
			if p.ImportPath == "github.com/velvetrope/velvetrope/cmd/velvetrope" && f == "usage.go" {
				continue
			}
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && name.MatchString(v) {
						seen[v] = true
					}
				}
				return true
			})
		}
	}
	var vars []string
	for v := range seen {
		vars = append(vars, v)
	}
	sort.Strings(vars)
	if len(vars) < 10 {
		t.Fatalf("found only %v in the binary's code: the scan is broken", vars)
	}
	return vars
}

// TestUsageListsEveryVariable: `velvetrope` alone and `velvetrope help`
// list every variable the code reads, and none it does not.
func TestUsageListsEveryVariable(t *testing.T) {
	vars := codeVariables(t)
	bare := runBin(t, env())
	asked := runBin(t, env(), "help")
	if bare.code != 2 || asked.code != 0 || bare.stderr != asked.stdout {
		t.Fatalf("velvetrope: exit %d; velvetrope help: exit %d; want 2 and 0 with the same usage (stderr, stdout)", bare.code, asked.code)
	}
	usage := asked.stdout
	var listed []string
	for _, m := range envLine.FindAllStringSubmatch(usage, -1) {
		listed = append(listed, m[1])
	}
	sort.Strings(listed)
	if !slices.Equal(listed, vars) {
		t.Fatalf("the usage lists the variables\n  %v\nthe code reads\n  %v\nusage:\n%s", listed, vars, usage)
	}
}

// TestUsageShowsEveryFlag: the top-level usage's line of each command
// names each of its flags (bench's are too many: its line names the
// main ones, its --help all).
func TestUsageShowsEveryFlag(t *testing.T) {
	usage := runBin(t, env(), "help").stdout
	for _, cmd := range commands {
		if cmd == "bench" {
			continue
		}
		i := strings.Index(usage, "  velvetrope "+cmd+" ")
		if i < 0 {
			t.Fatalf("the usage has no line for %s:\n%s", cmd, usage)
		}
		line := usage[i+2:]
		if j := strings.Index(line, "\n  velvetrope "); j >= 0 {
			line = line[:j]
		}
		for _, f := range readHelp(t, cmd).flags {
			if !strings.Contains(line, "--"+f+" ") && !strings.Contains(line, "--"+f+"]") {
				t.Errorf("the usage's line for %s does not name --%s:\n%s", cmd, f, line)
			}
		}
	}
}

// TestHelpOfEveryCommand: each subcommand answers --help on stdout with
// exit 0; the variables it lists are ones the code reads, and every such
// variable is listed by some subcommand.
func TestHelpOfEveryCommand(t *testing.T) {
	vars := codeVariables(t)
	listed := map[string]bool{}
	for _, cmd := range commands {
		h := readHelp(t, cmd)
		for _, v := range h.env {
			if !slices.Contains(vars, v) {
				t.Errorf("velvetrope %s --help lists %s, which the code does not read", cmd, v)
			}
			listed[v] = true
		}
	}
	for _, v := range vars {
		if !listed[v] {
			t.Errorf("no subcommand's --help lists %s", v)
		}
	}
	// the ones that once went wrong
	if r := runBin(t, env(), "rules", "--help"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: velvetrope rules validate") {
		t.Errorf("velvetrope rules --help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if h := readHelp(t, "top"); !slices.Contains(h.flags, "token") || !slices.Equal(h.env, []string{"VELVETROPE_ANALYTICS_TOKEN"}) {
		t.Errorf("velvetrope top --help: flags %v, variables %v; want --token and VELVETROPE_ANALYTICS_TOKEN", h.flags, h.env)
	}
}

// poison is, per process flag, what to pass to show that the process
// reads it: arguments it must fail on, and what the failure then says;
// a new flag needs an entry here.
var poison = map[string]struct {
	args  []string
	named string
}{
	"config": {[]string{"--config", "/nonexistent/poison-config.yaml"}, "/nonexistent/poison-config.yaml"},
	"rules":  {[]string{"--rules", "/nonexistent/poison-rules"}, "/nonexistent/poison-rules"},
	"http":   {[]string{"--http", "poison-http"}, "poison-http"},
	"grpc":   {[]string{"--grpc", "poison-grpc"}, "poison-grpc"},
	// fx's event log: dev stops on the rules that do not exist, the
	// others on Redis
	"debug": {[]string{"--debug"}, "[Fx] "},
}

// poisonEnv is the same for the variables that can be wrong: the value
// and what the failure names (the value, or the setting where the error
// says only what was tried); the others (passwords, tokens, the hash
// key) take any value.
var poisonEnv = map[string]struct{ value, named string }{
	"VELVETROPE_INSTANCE_ID":     {"poison instance", "poison instance"},
	"VELVETROPE_RULES":           {"/nonexistent/poison-env-rules", "/nonexistent/poison-env-rules"},
	"VELVETROPE_HTTP_ADDR":       {"poison-env-http", "poison-env-http"},
	"VELVETROPE_GRPC_ADDR":       {"poison-env-grpc", "poison-env-grpc"},
	"VELVETROPE_REDIS_ADDRS":     {"poison-env-redis", "poison-env-redis"},
	"VELVETROPE_KAFKA_BROKERS":   {"poison-env-kafka", "poison-env-kafka"},
	"VELVETROPE_CLICKHOUSE_ADDR": {"poison-env-clickhouse", "poison-env-clickhouse"},
	"VELVETROPE_PPROF_ADDR":      {"poison-env-pprof", "poison-env-pprof"},
	"VELVETROPE_STATE_DIR":       {"/dev/null/poison-env-state", "state_dir"},
}

// base is a process's environment for the poison runs: loopback ports
// nothing else uses, Redis and Kafka addresses nothing answers on, so
// that no process but dev gets to serve (the flag runs also give it rules
// that do not exist).
func base() []string {
	return env("VELVETROPE_HTTP_ADDR=127.0.0.1:0", "VELVETROPE_GRPC_ADDR=127.0.0.1:0",
		"VELVETROPE_REDIS_ADDRS=127.0.0.1:1", "VELVETROPE_KAFKA_BROKERS=127.0.0.1:1")
}

// TestProcessFlagsAreTheirOwn: each process lists only flags it reads —
// given a bad value for one, it fails naming that value — and refuses
// every process flag it does not list (aggregator once listed --rules and
// --grpc and ignored them).
func TestProcessFlagsAreTheirOwn(t *testing.T) {
	for _, p := range processes {
		t.Run(p, func(t *testing.T) {
			h := readHelp(t, p)
			e := append(base(), "VELVETROPE_RULES=/nonexistent/base-rules")
			for _, f := range h.flags {
				v, ok := poison[f]
				if !ok {
					t.Fatalf("velvetrope %s --help lists -%s, which has no poison value in this test: add one", p, f)
				}
				r := runBin(t, e, append([]string{p}, v.args...)...)
				if r.code == 0 || !strings.Contains(r.stderr, v.named) {
					t.Errorf("velvetrope %s %s: exit %d, stderr:\n%s\nwant a failure showing %q (a flag it lists must be read)",
						p, strings.Join(v.args, " "), r.code, r.stderr, v.named)
				}
			}
			for f, v := range poison {
				if slices.Contains(h.flags, f) {
					continue
				}
				r := runBin(t, e, append([]string{p}, v.args...)...)
				if r.code == 0 || !strings.Contains(r.stderr, "flag provided but not defined: -"+f) {
					t.Errorf("velvetrope %s %s: exit %d, stderr:\n%s\nwant the flag refused (it is not in its --help)",
						p, strings.Join(v.args, " "), r.code, r.stderr)
				}
			}
		})
	}
}

// TestProcessVariablesAreRead: each variable a process's --help lists and
// that can be wrong is read: a bad value stops the process, named.
func TestProcessVariablesAreRead(t *testing.T) {
	for _, p := range processes {
		t.Run(p, func(t *testing.T) {
			h := readHelp(t, p)
			if len(h.env) == 0 {
				t.Fatalf("velvetrope %s --help lists no variables:\n%s", p, h.text)
			}
			for _, v := range h.env {
				bad, ok := poisonEnv[v]
				if !ok {
					continue
				}
				r := runBin(t, append(base(), v+"="+bad.value), p)
				if r.code == 0 || !strings.Contains(r.stderr, bad.named) {
					t.Errorf("velvetrope %s with %s=%q: exit %d, stderr:\n%s\nwant a failure naming %q", p, v, bad.value, r.code, r.stderr, bad.named)
				}
			}
		})
	}
}
