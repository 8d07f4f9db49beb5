#!/usr/bin/env bash
# Packs build/gpumeter for a machine that has a GPU but not gpumeter's Debian libraries (the lent GPU machine
# of docs/validation.md): .gpucheck/gpumeter (stripped, RPATH $ORIGIN/lib), .gpucheck/lib (every library it
# links but glibc's) and .gpucheck/glibc (glibc's own, used only when the machine's glibc is older).
# Usage: scripts/gpu_check/bundle.sh [BINARY]   (run from the repository root; .gpucheck is git-ignored)
set -euo pipefail
bin=${1:-build/gpumeter}
out=.gpucheck
rm -rf "$out"
mkdir -p "$out/lib" "$out/glibc"
grep -qx '/.gpucheck/' .git/info/exclude 2>/dev/null || echo '/.gpucheck/' >>"$(git rev-parse --git-common-dir)/info/exclude"
objcopy --strip-debug "$bin" "$out/gpumeter"
patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$out/gpumeter"
ldd "$bin" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r so; do
  case "$(basename "$so")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|ld-linux-*) cp -L "$so" "$out/glibc/" ;;
    *) cp -L "$so" "$out/lib/" ;;
  esac
done
du -sh "$out"
