package doctest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary the curl examples run against, built once
// by TestMain.
var bin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithBinary(m, &bin)) }

// dev is one running `velvetrope dev`.
type dev struct {
	*testsvc.Process
	addr string // its HTTP listener, host:port
}

// logs returns what the process has written (its first MiB).
func (d *dev) logs() string { return d.Output() }

// startDev runs `velvetrope dev ARGS` in dir on free ports, with env and
// none of the caller's VELVETROPE_* variables, and waits until /healthz
// answers; the process is stopped (SIGTERM) when the test ends.
func startDev(t *testing.T, dir string, env []string, args ...string) *dev {
	t.Helper()
	addr := testsvc.FreeAddr(t)
	cmd := exec.Command(bin, append([]string{"dev", "--http", addr, "--grpc", testsvc.FreeAddr(t)}, args...)...)
	cmd.Dir = dir
	cmd.Env = testsvc.CleanEnv(env...)
	return &dev{Process: testsvc.StartProcess(t, cmd, addr, nil), addr: addr}
}
