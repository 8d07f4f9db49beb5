#!/usr/bin/env bash
# A clean Debian 12 (bookworm) root filesystem from the package mirror, made once with debootstrap and
# cached as a tarball; each caller unpacks its own copy. Used by `make image` and the package tests.
# Usage: scripts/debian_rootfs.sh CACHE_DIR DEST_DIR   (DEST_DIR must not exist; needs root)
set -euo pipefail
cache=${1:?cache dir}
dest=${2:?destination}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball="$cache/bookworm-minbase.tar"
mkdir -p "$cache"
# Tests run in parallel: one of them makes the tarball, the others wait for it.
exec 9>"$cache/.lock"
flock 9
if [ ! -s "$tarball" ]; then
  work=$(mktemp -d "$cache/debootstrap.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  if ! debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/log" 2>&1; then
    echo "debian_rootfs: debootstrap bookworm from $mirror failed; its log ends:" >&2
    tail -n 20 "$work/log" >&2
    exit 1
  fi
  tar -C "$work/rootfs" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$work"
  trap - EXIT
fi
flock -u 9
mkdir "$dest"
tar -C "$dest" --numeric-owner -xf "$tarball"
# Name resolution and the mirror's package lists, as on an installed system.
cp /etc/resolv.conf "$dest/etc/resolv.conf"
chroot "$dest" apt-get update -qq
