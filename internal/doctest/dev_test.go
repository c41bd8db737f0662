package doctest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary the curl examples run against, built once
// by TestMain.
var bin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithBinary(m, &bin)) }

// dev is one running `velvetrope dev`.
type dev struct {
	addr  string // its HTTP listener, host:port
	cmd   *exec.Cmd
	done  chan struct{}
	logMu sync.Mutex
	log   bytes.Buffer // requires logMu held; read it with logs
}

// logs returns what the process has written (its first MiB).
func (d *dev) logs() string {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	return d.log.String()
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

// startDev runs `velvetrope dev ARGS` in dir on free ports, with env and
// none of the caller's VELVETROPE_* variables, and waits until /healthz
// answers; the process is stopped (SIGTERM) when the test ends.
func startDev(t *testing.T, dir string, env []string, args ...string) *dev {
	t.Helper()
	d := &dev{addr: freeAddr(t), done: make(chan struct{})}
	cmd := exec.Command(bin, append([]string{"dev", "--http", d.addr, "--grpc", freeAddr(t)}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VELVETROPE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		s := bufio.NewScanner(pr)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			d.logMu.Lock()
			if d.log.Len() < 1<<20 {
				d.log.Write(s.Bytes())
				d.log.WriteByte('\n')
			}
			d.logMu.Unlock()
		}
	}()
	go func() { _ = cmd.Wait(); pw.Close(); <-logDone; close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-d.done:
			t.Fatalf("velvetrope dev exited before serving:\n%s", d.logs())
		default:
		}
		if r, err := http.Get("http://" + d.addr + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("velvetrope dev did not serve /healthz within 30 s:\n%s", d.logs())
		}
	}
}

func (d *dev) stop(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("velvetrope dev did not stop on SIGTERM within 30 s")
	}
}
