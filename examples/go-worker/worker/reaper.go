package worker

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Commands run in their own process groups, so a worker killed with SIGKILL would
// leave them running while the poller leases their runs again elsewhere ("twice at
// once"). The reaper is a helper process (this same executable, re-executed with
// ReaperEnv=1) reading one line per event on a pipe from the worker:
//
//	+PGID   the process group PGID is live
//	-PGID   it has ended (the worker killed or reaped it)
//	@PGID N its lease deadline is N nanoseconds on CLOCK_MONOTONIC (one clock for
//	        every process of the machine); sent at start and at each renewal
//
// When a registered group's deadline passes the reaper SIGKILLs it: a worker that
// is frozen (SIGSTOP, a stalled VM) runs no watchdog, while the poller takes the
// lease back and the run's next attempt starts elsewhere.
// When the pipe reaches EOF - the worker closed it, or died and the kernel closed
// it - the reaper SIGKILLs every group still registered and exits. It ignores
// SIGINT, SIGTERM and SIGHUP: only EOF ends it. A command spawned in the last
// milliseconds before a worker crash, not yet registered, can escape it.
const ReaperEnv = "SHARDCRON_GO_REAPER"

// MaybeRunReaper turns the process into the reaper when it was started as one,
// and then never returns. Call it first thing in main (and in TestMain).
func MaybeRunReaper() {
	if os.Getenv(ReaperEnv) != "1" {
		return
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	killed := runReaper(os.Stdin)
	if killed > 0 {
		fmt.Fprintf(os.Stderr, "shardcron reaper: the worker died; killed %d process groups\n", killed)
		os.Exit(3)
	}
	os.Exit(0)
}

func runReaper(in io.Reader) int {
	var mu sync.Mutex
	groups := map[int]*time.Timer{} // registered groups, with their deadline's timer (nil = none yet)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		arg, deadline, _ := strings.Cut(line[1:], " ")
		pgid, err := strconv.Atoi(arg)
		if err != nil || pgid <= 1 {
			continue
		}
		mu.Lock()
		timer, registered := groups[pgid]
		switch line[0] {
		case '+':
			if !registered {
				groups[pgid] = nil
			}
		case '-':
			if timer != nil {
				timer.Stop()
			}
			delete(groups, pgid)
		case '@':
			ns, err := strconv.ParseInt(deadline, 10, 64)
			if !registered || err != nil {
				break
			}
			if timer != nil {
				timer.Stop()
			}
			groups[pgid] = time.AfterFunc(time.Duration(ns-monotonicNanos()), func() {
				mu.Lock()
				defer mu.Unlock()
				if t, ok := groups[pgid]; ok && t != nil && monotonicNanos() >= ns {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
					delete(groups, pgid)
				}
			})
		}
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	for pgid, timer := range groups {
		if timer != nil {
			timer.Stop()
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return len(groups)
}

// monotonicNanos reads CLOCK_MONOTONIC, which the worker and its reaper share (Go's
// own monotonic readings are per process).
func monotonicNanos() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// reaperClient is the worker's end: started with the first command.
type reaperClient struct {
	mu     sync.Mutex
	w      io.WriteCloser
	cmd    *exec.Cmd
	fail   bool
	closed bool
}

func (r *reaperClient) send(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.w == nil && !r.fail {
		if err := r.start(); err != nil {
			r.fail = true // commands still run, without the crash guard
			fmt.Fprintf(os.Stderr, "shardcron go-worker: no reaper (%v): commands may outlive a crash\n", err)
		}
	}
	if r.w != nil {
		_, _ = io.WriteString(r.w, line+"\n")
	}
}

func (r *reaperClient) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ReaperEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// its own process group: a Ctrl-C to the worker's group does not reach it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe() // close-on-exec: commands do not inherit the write end
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.w, r.cmd = w, cmd
	return nil
}

func (r *reaperClient) register(pgid int)   { r.send("+" + strconv.Itoa(pgid)) }
func (r *reaperClient) unregister(pgid int) { r.send("-" + strconv.Itoa(pgid)) }

// setDeadline has the reaper kill the group at deadline (a time of this process,
// carried over to the machine's CLOCK_MONOTONIC) unless moved again before then.
func (r *reaperClient) setDeadline(pgid int, deadline time.Time) {
	at := monotonicNanos() + int64(time.Until(deadline))
	r.send("@" + strconv.Itoa(pgid) + " " + strconv.FormatInt(at, 10))
}

// close ends the reaper cleanly (every group registered was unregistered).
func (r *reaperClient) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.w != nil {
		r.w.Close()
		_ = r.cmd.Wait()
		r.w, r.cmd = nil, nil
	}
}
