#!/usr/bin/env bash
# Installs what gpumeter needs on Debian 12. Idempotent: does nothing when all packages are present. Works
# as root (or with sudo) on a fresh machine.
#   scripts/setup.sh        everything the build, the tests and the demo need (`make test`, `make build`)
#   scripts/setup.sh demo   only what building gpumeter and running `gpumeter demo` need (`make demo`)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-all}
case "$profile" in
  all | demo) ;;
  *) echo "usage: scripts/setup.sh [demo]" >&2; exit 2 ;;
esac

# The compiler and the libraries the gpumeter binary links, and Python for the demo's job. (The demo's job
# trains a real PyTorch model when python3-torch is installed, as the full set-up does; without it the job
# is a stand-in loop.)
packages=(
  build-essential cmake ninja-build ccache pkg-config python3
  libcli11-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev libsimdjson-dev
  zlib1g-dev libdeflate-dev libisal-dev libsqlite3-dev libcpp-httplib-dev libssl-dev
  libncurses-dev libcrypt-dev libpq-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
)
if [ "$profile" = all ]; then
  # The tests, benchmarks, sanitizers and fuzzers, and the services the integration tests start.
  packages+=(
    git libspdlog-dev isal sqlite3 libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev clang-tidy
    prometheus wrk tmux curl chromium procps openssl python3-yaml
    python3-torch python3-tqdm python3-numpy
    slurmctld slurmd slurm-client munge slurmdbd mariadb-server
    debootstrap umoci lintian help2man skopeo docker-registry zsh groff-base
    postgresql-15
    python3-ipykernel python3-nbclient python3-nbformat jupyter-notebook python3-optuna python3-rich
  )
  # Node.js and npm (for the charting library) ship in the machine image; install Debian's only when absent.
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # The tests start their own munged, slurmctld, slurmd and MariaDB on private sockets and ports: keep the
  # packages' init scripts from starting system-wide daemons during the install.
  policy=/usr/sbin/policy-rc.d
  added_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" && added_policy=1
  fi
  status=0
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" || status=$?
  if [ -n "$added_policy" ]; then $SUDO rm -f "$policy"; fi
  [ "$status" -eq 0 ] || exit "$status"
fi

# Front-end packages (the charting library inlined into HTML reports) come from the npm registry. The demo
# writes no HTML page: a binary built without them says so when asked for one.
if [ "$profile" = all ] && [ -f web/package.json ]; then
  if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in web/"
    (cd web && npm ci --no-audit --no-fund --loglevel=error)
  fi
  if [ -x web/build-assets.sh ]; then web/build-assets.sh; fi
fi
# The tests drive `gpumeter mcp` with the official MCP TypeScript SDK (tests/mcp, pinned by its lock file).
if [ "$profile" = all ] && [ -f tests/mcp/package.json ]; then
  if [ ! -d tests/mcp/node_modules ] || [ tests/mcp/package-lock.json -nt tests/mcp/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in tests/mcp/"
    (cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
