// Command go-worker is a shardcron worker in Go, built only from the generated
// stubs of proto/shardcron/v1. It serves the handlers registered below by name,
// and command tasks unless --no-commands is given.
//
//	go-worker --target 127.0.0.1:7400 --id go-1 --slots 4
//	go-worker --target node1:7400 --tls-ca ca.crt --token "$SHARDCRON_TOKEN"
//
// SIGINT/SIGTERM drains (no new leases, running runs finish and are reported, up to
// --drain-timeout); a second signal stops at once.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardcron/shardcron/examples/go-worker/worker"
	"google.golang.org/grpc/credentials"
)

type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return errors.New("want KEY=VALUE")
	}
	l[k] = val
	return nil
}

func main() {
	worker.MaybeRunReaper() // this executable is also the worker's reaper helper
	labels := labelFlags{}
	target := flag.String("target", envOr("SHARDCRON_TARGET", "127.0.0.1:7400"), "poller address host:port (comma-separated for several)")
	id := flag.String("id", "", "worker id (default host-pid)")
	slots := flag.Int("slots", 4, "runs at once")
	owner := flag.String("owner", envOr("SHARDCRON_OWNER", "default"), "sent as x-shardcron-owner metadata on the lease stream")
	noCommands := flag.Bool("no-commands", false, "serve handlers only, never run command tasks")
	killGrace := flag.Duration("kill-grace", 5*time.Second, "SIGTERM to SIGKILL grace for stopped commands and handlers")
	drainTimeout := flag.Duration("drain-timeout", 30*time.Second, "on SIGINT/SIGTERM, wait this long for running runs")
	inheritEnv := flag.Bool("inherit-env", false, "commands get this process's whole environment, not only PATH, HOME and LANG")
	token := flag.String("token", "", "bearer token sent as authorization metadata on every stream (default $SHARDCRON_TOKEN)")
	tlsCA := flag.String("tls-ca", os.Getenv("SHARDCRON_TLS_CA"), "connect with TLS, trusting the CA in this PEM file")
	tlsCert := flag.String("tls-cert", os.Getenv("SHARDCRON_TLS_CERT"), "this worker's certificate (PEM), for pollers that require one (mTLS); needs -tls-key")
	tlsKey := flag.String("tls-key", os.Getenv("SHARDCRON_TLS_KEY"), "the key of -tls-cert (PEM)")
	logLevel := flag.String("log-level", "info", "debug|info|warn|error")
	flag.Var(labels, "label", "KEY=VALUE advertised to the scheduler (repeatable)")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "bad --log-level:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *token == "" {
		*token = os.Getenv("SHARDCRON_TOKEN") // not a flag default: -help would print it
	}
	var creds credentials.TransportCredentials // nil: plaintext
	if *tlsCA != "" || *tlsCert != "" || *tlsKey != "" {
		var err error
		if creds, err = worker.ClientTLS(*tlsCA, *tlsCert, *tlsKey); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}

	w := worker.New(worker.Config{
		Targets:     strings.Split(*target, ","),
		ID:          *id,
		Slots:       *slots,
		Owner:       *owner,
		Labels:      labels,
		RunCommands: !*noCommands,
		KillGrace:   *killGrace,
		InheritEnv:  *inheritEnv,
		Logger:      logger,

		TransportCredentials: creds,
		Token:                *token,
	})
	w.Handle("upper", upper)
	w.Handle("sleep", sleep)
	w.Handle("echo", echo)
	w.Handle("fail", fail)

	ctx, stop := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-signals
		logger.Info("draining: no new leases; a second signal stops at once", "timeout", *drainTimeout)
		dctx, cancel := context.WithTimeout(ctx, *drainTimeout)
		go func() { <-signals; cancel() }()
		if err := w.Drain(dctx); err != nil {
			logger.Warn("drain incomplete", "err", err)
		}
		cancel()
		stop()
	}()
	logger.Info("go-worker starting", "id", w.ID(), "target", *target, "slots", *slots, "commands", !*noCommands,
		"tls", creds != nil, "token", *token != "")
	if !*noCommands {
		logger.Warn("commands are not contained: each runs as this worker's user, in a process group " +
			"of its own but no cgroup (no memory, CPU or process limits, no separation between owners), " +
			"and a process that leaves its group (setsid, a double fork) outlives its run; " +
			"`shardcron worker` contains runs")
	}
	if err := w.Run(ctx); err != nil {
		logger.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// upper: the payload, upper-cased, as the run's output.
func upper(_ context.Context, run *worker.Run) ([]byte, error) {
	return bytes.ToUpper(run.Payload), nil
}

// echo: the payload as the run's output.
func echo(_ context.Context, run *worker.Run) ([]byte, error) {
	return run.Payload, nil
}

// fail: fails the run with the payload as the error message.
func fail(_ context.Context, run *worker.Run) ([]byte, error) {
	msg := string(run.Payload)
	if msg == "" {
		msg = "failed on purpose"
	}
	return nil, errors.New(msg)
}

// sleep: sleeps for the payload's seconds (default 1), honouring cancellation.
func sleep(ctx context.Context, run *worker.Run) ([]byte, error) {
	secs := 1.0
	if p := strings.TrimSpace(string(run.Payload)); p != "" {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("sleep: payload %q is not a number of seconds", p)
		}
		secs = v
	}
	d := time.Duration(secs * float64(time.Second))
	fmt.Fprintf(run.Stdout(), "sleeping %s\n", d)
	select {
	case <-time.After(d):
		return []byte(fmt.Sprintf("slept %s\n", d)), nil
	case <-ctx.Done():
		fmt.Fprintf(run.Stdout(), "interrupted\n")
		return nil, ctx.Err()
	}
}
