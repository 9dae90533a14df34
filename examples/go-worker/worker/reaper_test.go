package worker

import (
	"fmt"
	"io"
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

func TestReaperKillsGroupAtItsDeadlineWhileTheWorkerIsSilent(t *testing.T) {
	c := exec.Command("sleep", "30")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	pr, pw := io.Pipe()
	reaped := make(chan int, 1)
	go func() { reaped <- runReaper(pr) }()
	pid := strconv.Itoa(c.Process.Pid)
	soon := func(d time.Duration) string { return strconv.FormatInt(monotonicNanos()+int64(d), 10) }
	// a renewal moves the deadline: the first one must not fire
	fmt.Fprintf(pw, "+%s\n@%s %s\n@%s %s\n", pid, pid, soon(100*time.Millisecond), pid, soon(400*time.Millisecond))
	start := time.Now()
	select { // the pipe stays open: the worker is alive but says nothing more
	case <-exited:
	case <-time.After(2 * time.Second):
		t.Fatal("group outlived its deadline")
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > time.Second {
		t.Fatalf("killed after %s, want about 400ms", el)
	}
	pw.Close()
	if n := <-reaped; n != 0 {
		t.Fatalf("%d groups killed at EOF, want 0 (it was killed at its deadline)", n)
	}
}
