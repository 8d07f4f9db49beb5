#!/usr/bin/env bash
# Times `make demo` (or `make TARGET`) on a fresh Debian 12 (docs/performance.md, "make demo on a fresh
# machine", "make test on a fresh machine"): a clean minbase root filesystem (scripts/debian_rootfs.sh, cached
# in CACHE_DIR), `make` installed, a clone of HEAD with nothing beside it, then `make TARGET` inside. Needs root
# (chroot, mounts). The output goes to LOG (default /tmp/gpumeter-demo.log). With TARGET=test the phases go on
# after a failed one (PHASES_KEEP_GOING=1), so that every phase is timed.
# Usage: scripts/time_demo.sh [CACHE_DIR] [LOG] [TARGET]   (CACHE_DIR defaults to build/debian-cache)
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${1:-build/debian-cache}
log=${2:-/tmp/gpumeter-demo.log}
target=${3:-demo}
root=$(mktemp -u /tmp/gpumeter-demo-root.XXXXXX)
mounts=(proc dev dev/pts tmp)
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "$root/${mounts[i]}" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do
    if mountpoint -q "$root/$m"; then
      echo "time_demo: $root/$m is still mounted; $root left in place" >&2
      return
    fi
  done
  rm -rf "$root"
}
trap cleanup EXIT
scripts/debian_rootfs.sh "$cache" "$root"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs tmpfs "$root/tmp"
git clone -q . "$root/root/gpumeter"
# The certificate authorities this machine adds (a proxy's, say) are what lets a fresh machine here reach npm.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make >/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
status=0
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=xterm PHASES_KEEP_GOING=1 \
  bash -c "cd /root/gpumeter && make $target" >"$log" 2>&1 || status=$?
end=$(date +%s)
echo "make $target: exit $status in $((end - start)) s (output: $log); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
