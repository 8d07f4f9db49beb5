#!/usr/bin/env bash
# Installs everything gpumeter's build, tests and demo need on Debian 12. Idempotent: does nothing when
# all packages are present. Works as root (or with sudo) on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libtomlplusplus-dev libsimdjson-dev
  zlib1g-dev libdeflate-dev libisal-dev isal libsqlite3-dev sqlite3 libcpp-httplib-dev libssl-dev
  libncurses-dev libcrypt-dev libgtest-dev libgmock-dev libbenchmark-dev clang-14
  prometheus wrk tmux curl chromium procps openssl python3-yaml
  python3-torch python3-tqdm python3-numpy
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  slurmctld slurmd slurm-client munge slurmdbd mariadb-server
  debootstrap umoci lintian help2man skopeo docker-registry zsh groff-base
  postgresql-15 libpq-dev
  python3-ipykernel python3-nbclient python3-nbformat jupyter-notebook python3-optuna python3-rich
)
# Node.js and npm (for the charting library) ship in the machine image; install Debian's only when absent.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

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

# Front-end packages (the charting library inlined into HTML reports) come from the npm registry.
if [ -f web/package.json ]; then
  if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in web/"
    (cd web && npm ci --no-audit --no-fund --loglevel=error)
  fi
  if [ -x web/build-assets.sh ]; then web/build-assets.sh; fi
fi
