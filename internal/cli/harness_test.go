package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
// variable (a developer's shell must not change what the binary does),
// plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VELVETROPE_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

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
	HTTP, GRPC string // host:port
	cmd        *exec.Cmd
	mu         sync.Mutex
	stdout     bytes.Buffer // requires mu held
	stderr     bytes.Buffer // requires mu held
	done       chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDev runs `velvetrope dev` on fresh loopback ports with config (an
// application config YAML; "" for none) and the environment e, waits
// until its banner is printed and /healthz answers, and stops it when
// the test ends.
func startDev(t *testing.T, config string, e []string) *dev {
	t.Helper()
	d := &dev{HTTP: freeAddr(t), GRPC: freeAddr(t), done: make(chan struct{})}
	args := []string{"dev", "--http", d.HTTP, "--grpc", d.GRPC}
	if config != "" {
		path := filepath.Join(t.TempDir(), "app.yaml")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = e
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = outW, errW
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var copies sync.WaitGroup
	copyTo := func(r io.Reader, buf *bytes.Buffer) {
		defer copies.Done()
		s := bufio.NewScanner(r)
		for s.Scan() {
			d.mu.Lock()
			if buf.Len() < 1<<20 {
				buf.Write(s.Bytes())
				buf.WriteByte('\n')
			}
			d.mu.Unlock()
		}
	}
	copies.Add(2)
	go copyTo(outR, &d.stdout)
	go copyTo(errR, &d.stderr)
	go func() {
		_ = d.cmd.Wait()
		outW.Close()
		errW.Close()
		copies.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-d.done:
			t.Fatalf("velvetrope dev exited before serving:\n%s\n%s", d.banner(), d.logs())
		default:
		}
		if r, err := http.Get("http://" + d.HTTP + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 && bannerDone(d.banner()) {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("velvetrope dev did not serve within 30 s:\n%s\n%s", d.banner(), d.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
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
func (d *dev) banner() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stdout.String()
}

// logs is what dev has written to stderr.
func (d *dev) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

func (d *dev) stop(t *testing.T) {
	if d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("velvetrope dev did not stop on SIGTERM within 30 s")
	}
}

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
