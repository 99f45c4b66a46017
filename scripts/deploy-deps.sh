#!/bin/sh
# deploy-deps.sh installs what the deployment targets (make image, make deploy-test) need: Debian's podman,
# runc, debootstrap and redis-server (the fleet test runs Debian's redis-server in the sandbox image), and a
# containers.conf that makes podman work on these machines (runc, because crun
# refuses the hybrid cgroup layout; explicit ulimits, because the default nofile/nproc are refused).
# Idempotent: it installs only what is missing and writes containers.conf only when it differs.
# make deps does not run it, so CI time stays as it is.
set -eu

missing=""
for pair in podman:podman runc:runc debootstrap:debootstrap /usr/lib/cni/host-local:containernetworking-plugins redis-server:redis-server; do
	cmd=${pair%%:*}
	pkg=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deploy-deps: missing Debian packages:$missing (run as root, or install them)" >&2
		exit 1
	fi
	echo "deploy-deps: installing$missing" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null; }
fi

conf=/etc/containers/containers.conf
want='# Written by codeinterp scripts/deploy-deps.sh.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
'
if [ "$(cat "$conf" 2>/dev/null)" != "$(printf '%s' "$want")" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deploy-deps: $conf needs runtime = \"runc\" and default_ulimits (run as root)" >&2
		exit 1
	fi
	mkdir -p "$(dirname "$conf")"
	printf '%s' "$want" >"$conf"
	echo "deploy-deps: wrote $conf" >&2
fi
