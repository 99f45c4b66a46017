#!/usr/bin/env bash
# `make run`: Envoy on 127.0.0.1:10000 with envoy/envoy.yaml (its model cluster pointed at the
# upstream) and the codeinterp server beside it on 127.0.0.1:50051 (and its Containers API on
# 127.0.0.1:8081, which Envoy's /v1/containers routes reach). Ctrl-C (or SIGTERM) stops both
# and waits for them. With an empty UPSTREAM the built-in demo model (bin/demomodel, no real model
# and no key) serves on $DEMO_LISTEN (127.0.0.1:8080) and is the upstream.
#   scripts/run.sh UPSTREAM CONFIG [server flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: run.sh UPSTREAM CONFIG [flags]" >&2; exit 2; }
upstream=$1
config=$2
shift 2
demo_listen=""
if [ -z "$upstream" ]; then
  demo_listen=${DEMO_LISTEN:-127.0.0.1:8080}
  upstream="http://$demo_listen"
fi

envoy_bin=${ENVOY_BIN:-}
if [ -z "$envoy_bin" ]; then
  envoy_bin=$(command -v envoy || true)
  [ -n "$envoy_bin" ] || envoy_bin=.venv/bin/envoy
fi
mkdir -p bin
go run ./cmd/envoyconf -in envoy/envoy.yaml -upstream "$upstream" -listen-address 127.0.0.1 -out bin/envoy-run.json

pids=()
stop() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

if [ -n "$demo_listen" ]; then
  bin/demomodel -listen "$demo_listen" &
  pids+=($!)
fi
bin/extproc --config "$config" "$@" &
pids+=($!)
"$envoy_bin" -c bin/envoy-run.json --log-level warn --base-id-path bin/envoy-base-id --use-dynamic-base-id &
pids+=($!)
echo "run: Envoy on http://127.0.0.1:10000 (admin 127.0.0.1:9901) -> $upstream; codeinterp on 127.0.0.1:50051 (admin 127.0.0.1:9090, Containers API 127.0.0.1:8081 behind Envoy's /v1/containers)" >&2
echo "run: OPENAI_BASE_URL=http://127.0.0.1:10000/v1; Ctrl-C stops them all" >&2
# Either process ending ends the session.
wait -n "${pids[@]}" || true
