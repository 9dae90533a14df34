package worker

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeRunReaper() // the test binary is re-executed as the reaper of command tests
	os.Exit(m.Run())
}

func TestReaperKillsRegisteredGroupsOnEOF(t *testing.T) {
	spawn := func() *exec.Cmd {
		c := exec.Command("sleep", "30")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	kept, killed := spawn(), spawn()
	defer kept.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- killed.Wait() }()
	in := "+" + strconv.Itoa(killed.Process.Pid) + "\n+" + strconv.Itoa(kept.Process.Pid) +
		"\n-" + strconv.Itoa(kept.Process.Pid) + "\n"
	if n := runReaper(strings.NewReader(in)); n != 1 {
		t.Fatalf("killed %d groups, want 1", n)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		t.Fatal("registered group still running")
	}
	if err := kept.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("unregistered group was killed: %v", err)
	}
}
