#!/bin/sh
# Copies the charting library (uPlot, from the npm registry, pinned in package-lock.json) into web/assets/,
# which CMake embeds into the binary so HTML reports work offline.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/node_modules/uplot/dist"
if [ ! -f "$src/uPlot.iife.min.js" ]; then
  echo "web/build-assets.sh: $src/uPlot.iife.min.js missing; run 'npm ci' in web/ first" >&2
  exit 1
fi
mkdir -p "$here/assets"
for f in uPlot.iife.min.js uPlot.min.css; do
  if ! cmp -s "$src/$f" "$here/assets/$f"; then cp "$src/$f" "$here/assets/$f"; fi
done
cp "$here/node_modules/uplot/LICENSE" "$here/assets/uPlot.LICENSE"
