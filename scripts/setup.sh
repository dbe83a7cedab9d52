#!/usr/bin/env bash
# Installs what edgeseek needs to build and test on Debian 12 (run as root, or with sudo).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libcli11-dev libhwy-dev
      libedit-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
      libvulkan-dev glslc spirv-tools glslang-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
      prometheus)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js and npm (test clients, test data): keep an existing installation (e.g. NodeSource's
# nodejs, which bundles npm and conflicts with Debian's npm package).
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
