package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary, built once by TestMain.
var bin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithBinary(m, &bin)) }

// result is one finished run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// env is the test process's environment without any VELVETROPE_*
// variable, plus extra (testsvc.CleanEnv).
func env(extra ...string) []string { return testsvc.CleanEnv(extra...) }

// runBin runs the binary with args and environment e to its end, at most
// 30 s (then it is killed and the test fails).
func runBin(t *testing.T, e []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = e
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("velvetrope %s did not end within 30 s:\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out.String(), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// dev is one running `velvetrope dev`.
type dev struct {
	*testsvc.Process
	GRPC string // host:port
}

// startDev runs `velvetrope dev` on fresh loopback ports with config (an
// application config YAML; "" for none) and the environment e, waits
// until its banner is printed and /healthz answers, and stops it when
// the test ends.
func startDev(t *testing.T, config string, e []string) *dev {
	t.Helper()
	httpAddr, grpcAddr := testsvc.FreeAddr(t), testsvc.FreeAddr(t)
	args := []string{"dev", "--http", httpAddr, "--grpc", grpcAddr}
	if config != "" {
		path := filepath.Join(t.TempDir(), "app.yaml")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = e
	p := testsvc.StartProcess(t, cmd, httpAddr, func(p *testsvc.Process) bool { return bannerDone(p.Stdout()) })
	return &dev{Process: p, GRPC: grpcAddr}
}

// bannerDone says whether the banner's last line is out: with a gRPC
// listener the /json example; then, with a generated admin token, the
// export line.
func bannerDone(b string) bool {
	if !strings.Contains(b, "/json -d") {
		return false
	}
	return !strings.Contains(b, "(generated for this run") || strings.Contains(b, "export VELVETROPE_ADMIN_TOKEN=")
}

// banner is what dev has written to stdout.
func (d *dev) banner() string { return d.Stdout() }

// logs is what dev has written to stderr.
func (d *dev) logs() string { return d.Stderr() }

// bannerLine is the first line of the banner that contains marker
// (which may end in "\n" to match a line's end), trimmed, or the test
// fails.
func bannerLine(t *testing.T, banner, marker string) string {
	t.Helper()
	for _, l := range strings.SplitAfter(banner, "\n") {
		if strings.Contains(l, marker) {
			return strings.TrimSpace(l)
		}
	}
	t.Fatalf("the banner has no line with %q:\n%s", marker, banner)
	return ""
}
