package worker

import (
	"strings"
	"testing"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
)

// envMap reads an exec environment as exec does: the last value of a key wins.
func envMap(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func TestCommandEnvIsAMinimalBaseUnlessInherited(t *testing.T) {
	t.Setenv("WORKER_ONLY", "worker-value")
	t.Setenv("SHARDCRON_TOKEN", "the-workers-token")
	t.Setenv("PATH", "/bin")
	r := &run{lease: &pb.Lease{RunId: "r1", JobId: "j1", Attempt: 2}, token: 7}
	task := &pb.CommandTask{Env: map[string]string{"GREETING": "hi"}, SecretEnv: map[string]string{"TOKEN": "s3cr3t"}}

	env := envMap(commandEnv(r, task, false))
	if _, ok := env["WORKER_ONLY"]; ok {
		t.Fatalf("the worker's own variable reached the command: %v", env)
	}
	for k, want := range map[string]string{
		"PATH": "/bin", "GREETING": "hi", "TOKEN": "s3cr3t", "SHARDCRON_RUN_ID": "r1",
		"SHARDCRON_JOB_ID": "j1", "SHARDCRON_ATTEMPT": "2", "SHARDCRON_FENCING_TOKEN": "7",
	} {
		if env[k] != want {
			t.Fatalf("%s = %q, want %q (env %v)", k, env[k], want, env)
		}
	}
	if env := envMap(commandEnv(r, task, true)); env["WORKER_ONLY"] != "worker-value" || env["TOKEN"] != "s3cr3t" {
		t.Fatalf("inherit: %v", env)
	}
	if _, ok := envMap(commandEnv(r, task, true))["SHARDCRON_TOKEN"]; ok {
		t.Fatalf("inherit passed the worker's token to the command")
	}
}
