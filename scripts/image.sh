#!/usr/bin/env bash
# Build the container image (default tag quorumkv:latest) with nothing
# pulled: the release binary, statically linked against glibc
# (-C target-feature=+crt-static on the gnu target; no musl target here),
# in an image FROM scratch (deploy/Dockerfile). Prints the image's size.
#
#   scripts/image.sh [TAG]
#   scripts/image.sh --binary PATH [TAG]   # an image of a binary already built
#
# If the binary is not static (a dependency that insists on dynamic
# linking, or --binary target/debug/quorumkv as CI does, to spare a second
# full build), the libraries `ldd` lists are copied into the image instead,
# at the same paths.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=
if [ "${1:-}" = --binary ]; then
  bin=$2
  shift 2
fi
tag=${1:-quorumkv:latest}
if [ -z "$bin" ]; then
  target=x86_64-unknown-linux-gnu
  echo "== static release build ($target, crt-static)"
  RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release --locked --target "$target" -p quorumkv
  bin=target/$target/release/quorumkv
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/etc/quorumkv" "$ctx/rootfs/tmp" "$ctx/data"
chmod 1777 "$ctx/rootfs/tmp"
# The image needs no debug info (the release profile keeps line tables).
strip -o "$ctx/rootfs/usr/bin/quorumkv" "$bin"
# Static (static-pie) binaries name no program interpreter and need no library.
if readelf -l "$bin" | grep -q 'program interpreter'; then
  echo "== $bin is dynamically linked: copying the libraries ldd lists"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
else
  echo "== $bin is statically linked"
fi
"$ctx/rootfs/usr/bin/quorumkv" --version
# Name lookups (peers by name) with glibc's built-in files and dns services.
printf 'hosts: files dns\n' > "$ctx/rootfs/etc/nsswitch.conf"
printf 'quorumkv:x:10001:10001::/data:/usr/bin/quorumkv\n' > "$ctx/rootfs/etc/passwd"
printf 'quorumkv:x:10001:\n' > "$ctx/rootfs/etc/group"
cp deploy/Dockerfile "$ctx/Dockerfile"
echo "== docker build -t $tag"
if ! out=$(docker build -q -t "$tag" "$ctx" 2>&1); then
  echo "$out"
  exit 1
fi
size=$(docker image inspect --format '{{.Size}}' "$tag")
echo "image $tag: $size bytes ($(( (size + 524288) / 1048576 )) MiB)"
