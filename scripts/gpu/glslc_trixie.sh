#!/usr/bin/env bash
# A newer glslc (Debian 13's shaderc 2025.2) runnable on Debian 12, for building the shader
# variants Debian 12's glslc 2023.2 cannot compile: GL_KHR_cooperative_matrix and
# GL_NV_cooperative_matrix2 (the tensor-core prefill GEMM for NVIDIA GPUs). The build detects
# what its glslc supports (cmake/vulkan_shaders.cmake) and the runtime picks what exists, so
# this is optional: CI and a plain `scripts/build.sh` use Debian 12's glslc.
#
# Debian 13's glslc needs glibc 2.38; this script downloads it together with Debian 13's libc6,
# libstdc++6 and libgcc-s1 into .glslc-trixie/ (git-ignored; a private apt state, nothing is
# installed into the system) and writes .glslc-trixie/glslc and .glslc-trixie/spirv-val
# (Debian 12's spirv-val does not know the new capabilities), wrappers that run the binaries
# through that glibc's own loader. Then:
#   cmake -S . -B build-cm2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGLSLC=$PWD/.glslc-trixie/glslc \
#     -DSPIRV_VAL=$PWD/.glslc-trixie/spirv-val
set -euo pipefail
cd "$(dirname "$0")/../.."
D=$PWD/.glslc-trixie
if [ -x "$D/glslc" ] && [ -x "$D/spirv-val" ] && "$D/glslc" --version >/dev/null 2>&1; then
  echo "$D/glslc"; exit 0
fi
mkdir -p "$D/apt/lists/partial" "$D/apt/cache/archives/partial" "$D/debs" "$D/root"
# The machine's own Debian archive (its configured apt sources, deb822 or one-line), suite trixie.
mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' | grep -v -- '-security' | head -1)
[ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
  awk '{print $2}' | grep -v -- '-security' | head -1)
[ -n "$mirror" ] || { echo "glslc_trixie.sh: no Debian archive in the machine's apt sources" >&2; exit 1; }
echo "deb $mirror trixie main" > "$D/apt/sources.list"
o=(-oDir::Etc::SourceList="$D/apt/sources.list" -oDir::Etc::SourceParts=/dev/null
   -oDir::State::Lists="$D/apt/lists" -oDir::Cache="$D/apt/cache" -oAPT::Architecture=amd64
   -oAPT::Sandbox::User=root)
apt-get "${o[@]}" update -qq
(cd "$D/debs" && apt-get "${o[@]}" download glslc libshaderc1 spirv-tools libc6 libstdc++6 libgcc-s1 >/dev/null)
for f in "$D"/debs/*.deb; do dpkg -x "$f" "$D/root"; done
L=$D/root/usr/lib/x86_64-linux-gnu
printf '#!/bin/sh\nexec "%s/ld-linux-x86-64.so.2" --library-path "%s" "%s/root/usr/bin/glslc" "$@"\n' \
  "$L" "$L" "$D" > "$D/glslc"
printf '#!/bin/sh\nexec "%s/ld-linux-x86-64.so.2" --library-path "%s" "%s/root/usr/bin/spirv-val" "$@"\n' \
  "$L" "$L" "$D" > "$D/spirv-val"
chmod +x "$D/glslc" "$D/spirv-val"
"$D/glslc" --version | head -1 >&2
echo "$D/glslc"
