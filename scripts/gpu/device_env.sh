# shellcheck shell=bash
# The GPU machine's setup, sourced by the job scripts of scripts/gpu/ from the repository root:
#   . scripts/gpu/device_env.sh BINDIR      (BINDIR: .gpubin or .esbin; pack_vulkan.sh fills it)
# - On the GPU machine (/usr/local/nvidia exists): the Vulkan loader and its libraries from
#   .gl/*.deb (../shared/device/README.md), then ldconfig; ES_NO_DPKG=1 skips it (a dry run).
# - B: BINDIR's absolute path; LD_LIBRARY_PATH starts with $B/lib (the shared libraries that
#   Ubuntu 24.04 lacks).
# - ES_VK_VALIDATION=0 (no validation layers there), ES_VK_CACHE_DIR (default /tmp/es_vk_cache).
# - VK_DRIVER_FILES names NVIDIA's ICD where `edgeseek devices` finds no device without it.
# - OUT (default /tmp/out) exists.
B=$(cd "$1" && pwd)
if [ -e /usr/local/nvidia ] && [ -z "${ES_NO_DPKG:-}" ]; then
  for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null 2>&1; done
  ldconfig
fi
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ES_VK_VALIDATION=0 ES_VK_CACHE_DIR=${ES_VK_CACHE_DIR:-/tmp/es_vk_cache}
if [ -e /usr/local/nvidia ] && ! "$B/edgeseek" devices >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
