#!/usr/bin/env bash
# Installs what edgeseek needs on Debian 12 (run as root, or with sudo).
#   scripts/setup.sh              everything to build and test (scripts/test.sh, CI)
#   scripts/setup.sh --build-only what the `edgeseek` target needs, nothing more (README's first
#                                 command): compiler, CMake, Ninja, the -dev libraries it links,
#                                 and the Vulkan headers + glslc for the Vulkan backend
set -euo pipefail
build_only=0
for a in "$@"; do
  case $a in
    --build-only) build_only=1 ;;
    *) echo "setup.sh: unknown argument '$a' (--build-only, or none for everything)" >&2; exit 2 ;;
  esac
done
# The `edgeseek` target with the default options (ONNX import on; MPI, tests and benchmarks are
# found or skipped by CMake).
PKGS=(build-essential cmake ninja-build pkg-config
      nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libcli11-dev libhwy-dev
      libedit-dev
      libonnx-dev libprotobuf-dev  # ONNX import: generated onnx-ml.pb.h + onnx_proto, protobuf headers
      libvulkan-dev glslc spirv-tools)  # the Vulkan backend's loader, shader compiler, spirv-val
install_missing() {  # installs the packages of "$@" that are missing
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $([ "$(id -u)" -ne 0 ] && echo sudo) dpkg --add-architecture arm64  # apt-get update follows
  fi
  # Node.js and npm (test clients, test data): keep an existing installation (e.g. NodeSource's
  # nodejs, which bundles npm and conflicts with Debian's npm package).
  ((build_only)) || command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
if ((build_only)); then
  install_missing "${PKGS[@]}"
  exit 0
fi
# Everything else the checks use: tests, benchmarks, lavapipe, sanitizers, fuzzing, tools.
PKGS+=(git libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
      glslang-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
      prometheus
      python3  # scripts/long_functions.py, tests/server/*.py, the scripts test
      valgrind  # Cli.CpuGenerateLeaksNothing
      clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer + ASan/UBSan (docs/fuzzing.md)
      clang-format  # `git clang-format` on changed lines (unversioned names: Debian 12 gives 14)
      clang-tidy-14  # scripts/tidy.sh: .clang-tidy's checks on changed files (docs/development.md)
      chromium chromium-driver)  # the web page's test drives headless Chromium (tests/server/web_test.mjs)
PKGS+=(gnuplot-nox)  # `bench --suite ... --report DIR` plots (tools/bench_suite.cpp)
PKGS+=(libopenmpi-dev openmpi-bin)  # the layer split over MPI ranks (docs/scale.md)
# aarch64 cross build of the whole tree and qemu-user runs of its tests (scripts/test_arm64.sh):
# arm64 libraries through Debian multiarch (header-only and arch-independent ones above serve
# both). Not libonnx-dev:arm64: its libonnxifi:arm64 does not co-install with the amd64 one (both
# ship /usr/lib/libonnxifi.so), so the cross build has -DES_ONNX=OFF.
# Only on x86-64 hosts: an ARM64 machine builds and tests natively.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  PKGS+=(g++-aarch64-linux-gnu qemu-user libc6:arm64 libhwy-dev:arm64 libgtest-dev:arm64
         libgmock-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcpp-httplib-dev:arm64
         libedit-dev:arm64 libvulkan-dev:arm64)
fi
install_missing "${PKGS[@]}"
