#!/usr/bin/env bash
# `make image`: the agent's OCI image for deploy/kubernetes/gpumeter-daemonset.yaml, without a container
# engine: a Debian 12 minbase root filesystem (scripts/debian_rootfs.sh) with gpumeter's .deb installed by apt,
# packed as an OCI image layout by umoci. Non-root user gpumeter (65532), the agent as entrypoint.
# Usage: scripts/build_image.sh BUILD_DIR [LAYOUT_DIR]  -> LAYOUT_DIR (default BUILD_DIR/gpumeter-oci), tags VERSION
# and latest; needs root
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:?build dir}")
version=$("$build/gpumeter" --version | awk '{print $2}')
layout=$(realpath -m "${2:-$build/gpumeter-oci}")
rm -rf "$layout"
mkdir -p "$(dirname "$layout")"
work=$(mktemp -d "$(dirname "$layout")/image-work.XXXXXX")
trap 'rm -rf "$work"' EXIT

(cd "$build" && cpack -G DEB -B "$work/deb" >/dev/null)
deb=$(ls "$work"/deb/gpumeter_*.deb)
scripts/debian_rootfs.sh "$build/debian-cache" "$work/rootfs"
cp "$deb" "$work/rootfs/tmp/"
chroot "$work/rootfs" sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends /tmp/$(basename "$deb")" >"$work/apt.log" 2>&1 ||
  { echo "build_image: installing the package failed:" >&2; tail -n 20 "$work/apt.log" >&2; exit 1; }
chroot "$work/rootfs" groupadd --system -K SYS_GID_MAX=65532 --gid 65532 gpumeter
chroot "$work/rootfs" useradd --system -K SYS_UID_MAX=65532 --uid 65532 --gid 65532 --home-dir /var/lib/gpumeter --no-create-home \
  --shell /usr/sbin/nologin gpumeter
install -d -o 65532 -g 65532 -m 0750 "$work/rootfs/var/lib/gpumeter"
# What a container never uses: package lists and caches, logs, man pages, locales (copyright files stay).
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/* "$work"/rootfs/var/cache/debconf/*-old \
  "$work"/rootfs/var/log/* "$work"/rootfs/usr/share/man/* "$work"/rootfs/usr/share/locale/* \
  "$work"/rootfs/usr/share/info/* "$work/rootfs/tmp/$(basename "$deb")"
rm -f "$work/rootfs/etc/resolv.conf"

umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci unpack --image "$layout:$version" "$work/bundle" >/dev/null
cp -a "$work/rootfs/." "$work/bundle/rootfs/"
umoci repack --image "$layout:$version" --history.created_by "scripts/build_image.sh (debootstrap bookworm minbase + gpumeter_${version}_amd64.deb)" "$work/bundle"
umoci config --image "$layout:$version" --os linux --architecture amd64 \
  --config.user 65532:65532 --config.workingdir /var/lib/gpumeter \
  --config.entrypoint /usr/bin/gpumeter --config.cmd agent --config.cmd --listen=0.0.0.0:9835 \
  --config.exposedports 9835/tcp --config.volume /var/lib/gpumeter \
  --config.label org.opencontainers.image.title=gpumeter \
  --config.label org.opencontainers.image.description="gpumeter agent: per-owner GPU cost as Prometheus metrics" \
  --config.label org.opencontainers.image.version="$version" \
  --config.label org.opencontainers.image.base.name=debian:bookworm \
  --history.created_by "umoci config: user gpumeter, entrypoint gpumeter agent"
umoci tag --image "$layout:$version" latest
umoci gc --layout "$layout"
echo "image: $layout ($version, latest): $(du -sh "$layout" | cut -f1)"
