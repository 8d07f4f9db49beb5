#!/usr/bin/env bash
# Peak memory of `gpumeter trace` against the size of the trace it reads: each file analysed by its own
# gpumeter process (GNU time's maximum resident set size), so one measurement does not inherit another's peak.
# Usage: bench/trace_memory.sh GPUMETER_BINARY FILE...   (make bench runs it on $GPUMETER_BENCH_TRACE)
set -euo pipefail
bin=${1:?gpumeter binary}
shift
printf '%-40s %12s %10s %12s %8s %10s\n' file json_MB seconds peak_RSS_MB RSS/json MB/s
for f in "$@"; do
  json_bytes=$("$bin" trace "$f" --json --no-progress --price 1 | python3 -c 'import json,sys; print(sum(x["bytes"] for x in json.load(sys.stdin)["files"]))')
  out=$( { /usr/bin/time -f '%e %M' "$bin" trace "$f" --json --no-progress --price 1 >/dev/null; } 2>&1 | tail -n 1)
  secs=${out% *}
  rss_kb=${out#* }
  python3 - "$f" "$json_bytes" "$secs" "$rss_kb" <<'PY'
import sys
f, b, s, r = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print(f"{f[-40:]:<40} {b / 1e6:12.1f} {s:10.2f} {r / 1024:12.1f} {r * 1024 / b:8.3f} {b / 1e6 / s:10.0f}")
PY
done
