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
)

// Commands run in their own process groups, so a worker killed with SIGKILL would
// leave them running while the poller leases their runs again elsewhere ("twice at
// once"). The reaper is a helper process (this same executable, re-executed with
// ReaperEnv=1) reading one line per event on a pipe from the worker:
//
//	+PGID   the process group PGID is live
//	-PGID   it has ended (the worker killed or reaped it)
//
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
	groups := map[int]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return len(groups)
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
