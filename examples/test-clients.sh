#!/usr/bin/env bash
# make test-clients: prove that proto/ is enough to build clients and workers in
# other languages.
#
#  1. generates stubs for Go, TypeScript and Java from proto/shardcron/v1/*.proto
#     with each ecosystem's standard generator (into gitignored build dirs);
#  2. builds examples/go-worker (and runs its unit tests), examples/ts-client and
#     examples/java-client;
#  3. starts `shardcron dev --workers 0` on a free port, with an auth file, and the Go
#     worker (which serves handlers AND command tasks: it is the only worker, so every
#     run below goes through the Go implementation of the lease stream); the clients
#     and checks send an admin principal's token, the Go worker a worker principal's,
#     and the TypeScript and Java clients are also shown refused without one;
#  4. moves a shard between two real pollers (in-process, on one SQLite store)
#     while the Go worker runs a command leased by the first
#     (checks/test_go_shard_move.py, with pytest);
#  5. runs the checks, prints one line per check and a closing line
#     "N passed, M failed"; exits non-zero on any failure.
#
# Everything it starts is stopped on exit. Downloads are cached (Go module cache,
# ~/.npm, ~/.m2, and protoc plugins under $SHARDCRON_EXAMPLES_CACHE), so a second
# run only regenerates, rebuilds and tests.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="$ROOT/.venv/bin/python"
SHARDCRON="$ROOT/.venv/bin/shardcron"
CACHE="${SHARDCRON_EXAMPLES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardcron-examples}"
LEASE_TTL=2 # seconds: short, so that heartbeats and renewals happen during the checks
# protoc-gen-go comes from the same google.golang.org/protobuf version as go.mod's.
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

GO_DIR="$HERE/go-worker"
TS_DIR="$HERE/ts-client"
JAVA_DIR="$HERE/java-client"
BUILD="$HERE/build"

T0=$SECONDS
PASSED=0
FAILED=0
PIDS=()
CHECK_PID=
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardcron-clients.XXXXXX")"

log() { printf '== %s\n' "$*"; }

cleanup() {
  local pid
  if [ -n "$CHECK_PID" ]; then # a check interrupted by a signal: it and its children
    pkill -TERM -P "$CHECK_PID" 2>/dev/null || true
    kill -TERM "$CHECK_PID" 2>/dev/null || true
  fi
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# check NAME CMD...: runs CMD, counts it, shows its output when it fails. CMD runs
# as a background job so that `set -e` holds inside shell functions too (it is
# ignored in a function called from an `||` list).
check() {
  local name="$1"; shift
  local out="$WORK/check-$name.log" start=$SECONDS rc=0
  "$@" >"$out" 2>&1 &
  CHECK_PID=$!
  wait "$CHECK_PID" || rc=$?
  CHECK_PID=
  if [ "$rc" -eq 0 ]; then
    PASSED=$((PASSED + 1))
    printf 'PASS %-22s (%ds)\n' "$name" $((SECONDS - start))
    sed 's/^/     /' "$out" | tail -n 12
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL %-22s (%ds, exit %d)\n' "$name" $((SECONDS - start)) "$rc"
    sed 's/^/     /' "$out" | tail -n 40
  fi
  return 0
}

finish() {
  echo "total $((SECONDS - T0))s"
  echo "$PASSED passed, $FAILED failed"
  if [ "$FAILED" -eq 0 ]; then exit 0; fi
  exit 1
}

# Debian's Maven prints colour resets even with -B.
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }

# replace_if_changed NEW OLD: moves NEW over OLD unless they hold the same files,
# so that unchanged stubs do not trigger rebuilds.
replace_if_changed() {
  if [ -d "$2" ] && diff -rq "$1" "$2" >/dev/null 2>&1; then
    rm -rf "$1"
  else
    rm -rf "$2"
    mkdir -p "$(dirname "$2")"
    mv "$1" "$2"
  fi
}

# --- tools -------------------------------------------------------------------------
missing=()
command -v go >/dev/null || missing+=(golang-go)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -q && apt-get install -y -q "${missing[@]}"
fi
if [ ! -x "$PY" ]; then
  log "creating the Python venv (make install)"
  make -C "$ROOT" install
fi
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
mkdir -p "$CACHE" "$BUILD"

PROTOS=("$ROOT"/proto/shardcron/v1/*.proto)
WKT="$("$PY" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
protoc_py() { "$PY" -m grpc_tools.protoc -I"$ROOT/proto" -I"$WKT" "$@" "${PROTOS[@]}"; }

# --- Go: protoc-gen-go + protoc-gen-go-grpc from the Go module proxy ------------------
gen_go() {
  local pbv grpcv bin
  pbv="$(awk '$1 == "google.golang.org/protobuf" {print $2}' "$GO_DIR/go.mod")"
  grpcv="$(awk '$1 == "google.golang.org/grpc" {print $2}' "$GO_DIR/go.mod")"
  bin="$CACHE/go-plugins/protobuf-$pbv-grpc-$PROTOC_GEN_GO_GRPC_VERSION"
  if [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-go-grpc" ]; then
    GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$pbv"
    GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
  fi
  local out="$WORK/gen-go"
  mkdir -p "$out"
  # go_package is github.com/shardcron/shardcron/gen/go/shardcron/v1: generate that
  # module locally; go.mod's replace points at it.
  printf 'module github.com/shardcron/shardcron/gen/go\n\ngo 1.24\n\nrequire (\n\tgoogle.golang.org/grpc %s\n\tgoogle.golang.org/protobuf %s\n)\n' \
    "$grpcv" "$pbv" >"$out/go.mod"
  protoc_py --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
    --go_out="$out" --go_opt=module=github.com/shardcron/shardcron/gen/go \
    --go-grpc_out="$out" --go-grpc_opt=module=github.com/shardcron/shardcron/gen/go
  replace_if_changed "$out" "$GO_DIR/gen"
}
build_go() {
  (cd "$GO_DIR" && go build -o "$BUILD/go-worker" . && go vet ./...)
}

# --- TypeScript: ts-proto (outputServices=grpc-js) from npm, compiled with tsc ----------
gen_ts() {
  local stamp="$TS_DIR/node_modules/.shardcron-lock"
  if [ ! -f "$stamp" ] || ! cmp -s "$stamp" "$TS_DIR/package-lock.json"; then
    (cd "$TS_DIR" && npm ci --no-audit --no-fund --prefer-offline)
    cp "$TS_DIR/package-lock.json" "$stamp"
  fi
  local out="$WORK/gen-ts"
  mkdir -p "$out"
  protoc_py --plugin=protoc-gen-ts_proto="$TS_DIR/node_modules/.bin/protoc-gen-ts_proto" \
    --ts_proto_out="$out" \
    --ts_proto_opt=outputServices=grpc-js,env=node,forceLong=bigint,useDate=true,esModuleInterop=true,useOptionals=none
  replace_if_changed "$out" "$TS_DIR/src/gen"
}
build_ts() {
  (cd "$TS_DIR" && rm -rf dist && node_modules/.bin/tsc -p .)
}

# --- Java: protoc + protoc-gen-grpc-java from Maven Central, built with Maven -----------
gen_java() {
  (cd "$JAVA_DIR" && mvn -q -B initialize) 2>&1 | strip_ansi
  local plugins="$JAVA_DIR/target/protoc-plugins"
  chmod +x "$plugins/protoc" "$plugins/protoc-gen-grpc-java"
  local out="$WORK/gen-java"
  mkdir -p "$out"
  # grpcio-tools' protoc has no java_out: the standalone protoc of the same release.
  "$plugins/protoc" -I"$ROOT/proto" -I"$WKT" --plugin=protoc-gen-grpc-java="$plugins/protoc-gen-grpc-java" \
    --java_out="$out" --grpc-java_out="$out" "${PROTOS[@]}"
  replace_if_changed "$out" "$JAVA_DIR/target/generated-sources/proto"
}
build_java() {
  (cd "$JAVA_DIR" && mvn -q -B compile) 2>&1 | strip_ansi
}

log "generating stubs and building (cache: $CACHE)"
check gen-go gen_go
check build-go-worker build_go
check go-worker-unit-tests bash -c "cd '$GO_DIR' && go test -count=1 ./..."
check gen-ts gen_ts
check build-ts-client build_ts
check gen-java gen_java
check build-java-client build_java
if [ "$FAILED" -gt 0 ]; then
  echo "a generation or build step failed: not starting the live checks"
  finish
fi

# --- shard moves: two pollers on one store, the Go worker connected to both -------------
# (pytest from the root: the check reuses tests/test_shard_move.py's pollers)
check go-shard-move bash -c "cd '$ROOT' && SHARDCRON_GO_WORKER='$BUILD/go-worker' \
  exec '$PY' -m pytest -q -p no:cacheprovider --basetemp '$WORK/pytest' examples/checks/test_go_shard_move.py"

# --- live: shardcron dev + the Go worker ----------------------------------------------
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
TARGET="127.0.0.1:$PORT"
WORKER_ID="go-worker-$$"
# Every live check runs against a node with an auth file: the clients and the checks
# send an admin token (SHARDCRON_TOKEN), the Go worker a worker principal's token.
CLIENT_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
WORKER_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
digest() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
cat >"$WORK/auth.toml" <<EOF
[[principal]]
name = "example-clients"
token_sha256 = "$(digest "$CLIENT_TOKEN")"
role = "admin"

[[principal]]
name = "go-workers"
token_sha256 = "$(digest "$WORKER_TOKEN")"
role = "worker"
owners = ["*"]
EOF
export SHARDCRON_TOKEN="$CLIENT_TOKEN"
log "starting shardcron dev on $TARGET (auth file, lease TTL ${LEASE_TTL}s, no in-process worker)"
"$SHARDCRON" dev --listen "$TARGET" --data-dir "$WORK/data" --metrics-listen '' --http-listen '' --workers 0 \
  --auth-file "$WORK/auth.toml" --lease-ttl "${LEASE_TTL}s" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")

ready=0
for _ in $(seq 150); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  if "$SHARDCRON" --target "$TARGET" --timeout 2 cluster status >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" -ne 1 ]; then
  FAILED=$((FAILED + 1))
  echo "FAIL server did not come up:"; tail -n 30 "$WORK/server.log"
  finish
fi

# start_worker: starts the Go worker and waits until the poller lists it.
start_worker() {
  log "starting the Go worker $WORKER_ID"
  "$BUILD/go-worker" --target "$TARGET" --id "$WORKER_ID" --token "$WORKER_TOKEN" --slots 4 --kill-grace 2s \
    >>"$WORK/go-worker.log" 2>&1 &
  WORKER_PID=$!
  disown "$WORKER_PID" # no "Killed" job notice from bash after the crash check
  PIDS=("$WORKER_PID" "${PIDS[@]}") # stopped before the server
  for _ in $(seq 100); do
    if "$SHARDCRON" --target "$TARGET" --json cluster status 2>/dev/null | grep -q "\"$WORKER_ID\""; then return 0; fi
    sleep 0.1
  done
}
start_worker

gocheck() { "$PY" "$HERE/checks/go_worker_checks.py" --target "$TARGET" --worker-id "$WORKER_ID" --lease-ttl "$LEASE_TTL" "$@"; }
check worker-connected gocheck cluster
check go-handler-upper gocheck upper                       # (a)
java_client() { cd "$JAVA_DIR" && java -cp "target/classes:$(cat target/classpath.txt)" io.shardcron.examples.JavaClient "$@"; }
# refused CMD...: without a token CMD fails, and with UNAUTHENTICATED
refused() { unset SHARDCRON_TOKEN; ! "$@" >"$WORK/refused.log" 2>&1 && cat "$WORK/refused.log" && grep -q UNAUTHENTICATED "$WORK/refused.log"; }
check ts-client node "$TS_DIR/dist/main.js" --target "$TARGET" --timeout 60   # (b)
check ts-client-no-token refused node "$TS_DIR/dist/main.js" --target "$TARGET" --timeout 10
check java-client java_client --target "$TARGET" --timeout 60 # (c)
check java-client-no-token refused java_client --target "$TARGET" --timeout 10
check go-handler-cancel gocheck cancel                     # (d)
check go-lease-renewal gocheck renew
check go-handler-error gocheck fail
check go-command-timeout gocheck command-timeout
check go-worker-freeze gocheck --worker-pid "$WORKER_PID" --scratch "$WORK" freeze # SIGSTOP, then SIGCONT
check go-worker-crash gocheck --worker-pid "$WORKER_PID" --scratch "$WORK" crash # SIGKILLs the worker
start_worker
check go-worker-drain gocheck --worker-pid "$WORKER_PID" drain # stops the worker: last

if [ "$FAILED" -gt 0 ]; then
  echo "--- go-worker log (tail)"; tail -n 40 "$WORK/go-worker.log"
  echo "--- server log (tail)"; tail -n 40 "$WORK/server.log"
fi
finish
