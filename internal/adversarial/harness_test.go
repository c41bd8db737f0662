package adversarial

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary under attack, built once by TestMain.
var bin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithBinary(m, &bin)) }

// proc is one running velvetrope process.
type proc struct {
	*testsvc.Process
	GRPC string // its gRPC listener, host:port (dev and checker)
}

// logs returns what the process has written to stdout and stderr (its
// first MiB).
func (p *proc) logs() string { return p.Output() }

// options of a process under test.
type options struct {
	kind   string            // subcommand; default "dev"
	rules  map[string]string // file name → contents, written to a fresh rules directory
	config string            // application config YAML, written to a file; "" for none
	env    []string
	args   []string
}

// start runs the binary with o and waits until /healthz answers; the
// process is stopped when the test ends.
func start(t *testing.T, o options) *proc {
	t.Helper()
	if o.kind == "" {
		o.kind = "dev"
	}
	dir := t.TempDir()
	httpAddr, grpcAddr := testsvc.FreeAddr(t), testsvc.FreeAddr(t)
	args := []string{o.kind, "--http", httpAddr}
	if o.kind == "dev" || o.kind == "checker" {
		args = append(args, "--grpc", grpcAddr)
	}
	if len(o.rules) > 0 {
		rd := filepath.Join(dir, "rules")
		if err := os.Mkdir(rd, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range o.rules {
			if err := os.WriteFile(filepath.Join(rd, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, "--rules", rd)
	}
	if o.config != "" {
		cf := filepath.Join(dir, "app.yaml")
		if err := os.WriteFile(cf, []byte(o.config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", cf)
	}
	args = append(args, o.args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), o.env...)
	return &proc{Process: testsvc.StartProcess(t, cmd, httpAddr, nil), GRPC: grpcAddr}
}

// exited reports whether the process has ended (a crash under attack).
func (p *proc) exited() bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// rssKB reads one field of /proc/PID/status in KiB: "VmRSS" (now) or
// "VmHWM" (the peak).
func (p *proc) rssKB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd().Process.Pid))
	if err != nil {
		t.Fatalf("read the process's status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.Cmd().Process.Pid)
	return 0
}

// do sends one HTTP request and returns the status and body.
func (p *proc) do(t *testing.T, method, path, body string, header ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.HTTP+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// metric sums the samples of a Prometheus metric on /metrics whose
// labels contain every one of labels (e.g. `reason="rule"`).
func (p *proc) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	_, body := p.do(t, "GET", "/metrics", "")
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
