#!/usr/bin/env bash
# Installs what ranktime needs on Debian 12 (as root, apt only) and builds it into ./build.
# Idempotent: installs only missing packages, reconfigures only when needed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build openmpi-bin libopenmpi-dev nlohmann-json3-dev
          libcli11-dev libgtest-dev googletest pybind11-dev python3-dev python3-numpy python3-pytest
          python3-torch libtorch-dev clang-format chromium zlib1g-dev libisal-dev iproute2
          pkgconf python3-venv python3-pip python3-setuptools python3-wheel  # the docs' tests
          libmicrohttpd-dev prometheus tmux)  # the metrics endpoint; its tests
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPython_EXECUTABLE=/usr/bin/python3 ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
