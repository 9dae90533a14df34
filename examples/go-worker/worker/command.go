package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
)

// baseEnvKeys are what a command gets of the worker's environment, unless the worker
// inherits it all: enough to find programs and speak the locale, nothing the worker
// holds (its credentials, its settings).
var baseEnvKeys = []string{"PATH", "HOME", "LANG"}

// credentialEnvKeys are what a command never gets of the worker's environment, even
// when it inherits it all: the worker's token, and where a node's keys are.
var credentialEnvKeys = map[string]bool{
	"SHARDCRON_TOKEN": true, "SHARDCRON_TOKEN_FILE": true, "SHARDCRON_NODE_TOKEN": true,
	"SHARDCRON_SECRETS_KEY_FILE": true, "SHARDCRON_AUTH_FILE": true, "SHARDCRON_TLS_KEY": true,
}

const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// commandEnv is the environment of a command run: PATH, HOME and LANG of the worker's
// (all of it but its credentials when inherit), then the task's env and secret_env,
// then the SHARDCRON_* variables (exec uses the last value of a repeated key).
func commandEnv(r *run, task *pb.CommandTask, inherit bool) []string {
	var env []string
	if inherit {
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); !credentialEnvKeys[k] {
				env = append(env, kv)
			}
		}
	} else {
		for _, k := range baseEnvKeys {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		if _, ok := os.LookupEnv("PATH"); !ok {
			env = append(env, "PATH="+defaultPath)
		}
	}
	for k, v := range task.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range task.SecretEnv {
		env = append(env, k+"="+v)
	}
	return append(env,
		"SHARDCRON_RUN_ID="+r.lease.RunId,
		"SHARDCRON_JOB_ID="+r.lease.JobId,
		"SHARDCRON_ATTEMPT="+strconv.Itoa(int(r.lease.Attempt)),
		"SHARDCRON_FENCING_TOKEN="+strconv.FormatUint(r.token, 10),
	)
}

func killGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig) // ESRCH when the group is gone: fine
}

// runCommand runs argv in its own process group, streams its stdout and stderr,
// and ends the whole group when the run is stopped: SIGTERM, KillGrace, SIGKILL
// on cancel or timeout; SIGKILL at once when the lease is lost.
func (w *Worker) runCommand(r *run, task *pb.CommandTask) outcome {
	if len(task.Argv) == 0 {
		return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, "empty argv")
	}
	if task.Cwd != "" {
		if st, err := os.Stat(task.Cwd); err != nil || !st.IsDir() {
			return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, fmt.Sprintf("working directory %q does not exist", task.Cwd))
		}
	}
	emit := w.emitter(r)
	outR, outW, err := os.Pipe()
	if err != nil {
		return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, err.Error())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, err.Error())
	}
	cmd := exec.Command(task.Argv[0], task.Argv[1:]...)
	cmd.Env = commandEnv(r, task, w.cfg.InheritEnv)
	cmd.Dir = task.Cwd
	cmd.Stdout, cmd.Stderr = outW, errW // *os.File: the child writes to them directly
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		msg := fmt.Sprintf("cannot start %q: %v", task.Argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			msg = fmt.Sprintf("executable %q not found", task.Argv[0])
		}
		return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, msg)
	}
	pgid := cmd.Process.Pid
	w.reaper.register(pgid) // killed by the reaper if this process dies
	w.mu.Lock()
	r.pgid = pgid // renewals move the reaper's deadline from now on
	w.reaper.setDeadline(pgid, r.deadline)
	w.mu.Unlock()
	pumped := make(chan struct{}, 2)
	pump := func(f *os.File, stream string) {
		defer func() { pumped <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				emit(stream, append([]byte(nil), buf[:n]...))
			}
			if err != nil {
				if err != io.EOF && !errors.Is(err, os.ErrClosed) {
					w.log.Debug("reading output", "run", r.lease.RunId, "err", err)
				}
				return
			}
		}
	}
	go pump(outR, "stdout")
	go pump(errR, "stderr")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	stopped := false
	select {
	case <-exited:
	case <-r.ctx.Done():
		stopped = true
		select {
		case <-r.killNow:
		default:
			killGroup(pgid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-r.killNow:
			case <-time.After(w.cfg.KillGrace):
			}
		}
		killGroup(pgid, syscall.SIGKILL)
		<-exited
	}
	// The run is over: nothing of its group may outlive it (a leftover background
	// child would also hold the pipes open).
	killGroup(pgid, syscall.SIGKILL)
	w.mu.Lock()
	r.pgid = 0
	w.mu.Unlock()
	w.reaper.unregister(pgid)
	deadline := time.After(time.Second)
	for i := 0; i < 2; i++ {
		select {
		case <-pumped:
		case <-deadline: // a process that left the group holds the pipes
			i = 2
		}
	}
	outR.Close()
	errR.Close()

	var code int32
	var msg string
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		code = -int32(ws.Signal())
		msg = "killed by signal " + signalName(ws.Signal())
	default:
		code = int32(ws.ExitStatus())
		msg = fmt.Sprintf("exit code %d", code)
	}
	if stopped {
		w.mu.Lock()
		stopping := r.stop != stopNone
		w.mu.Unlock()
		if stopping {
			return w.stoppedOutcome(r, &code)
		}
	}
	if code == 0 {
		return outcome{state: pb.RunState_RUN_STATE_SUCCEEDED, exitCode: &code}
	}
	return outcome{state: pb.RunState_RUN_STATE_FAILED, reason: pb.RunReason_RUN_REASON_NON_ZERO_EXIT, exitCode: &code, err: msg}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return strconv.Itoa(int(s))
}
