# Cross-compiling edgeseek for aarch64 Linux on a Debian 12 x86-64 host (scripts/test_arm64.sh):
# g++-aarch64-linux-gnu, arm64 libraries from Debian's multiarch packages (scripts/setup.sh's
# `:arm64` list), programs that run on the host (glslc, spirv-val: SPIR-V is the same for every
# CPU), and qemu-user to run what is built (try_run, ctest). Configure with -DES_ONNX=OFF: Debian
# 12's libonnx-dev:arm64 does not co-install with the amd64 one.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries and CMake package files only from the arm64 side; programs (ninja, glslc) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (pkg_check_modules: pcre2, utf8proc, cpp-httplib, libedit) is the host's: point it
# at the arm64 .pc files only, or it hands out the amd64 libraries' paths.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
unset(ENV{PKG_CONFIG_PATH})
# The CPU model is chosen per run with QEMU_CPU (e.g. max, cortex-a72). No -L: the loader and
# libc must be the multiarch libc6:arm64 ones (/lib/aarch64-linux-gnu), which libhwy1:arm64 and
# libstdc++6:arm64 are linked with; mixing in the cross toolchain's ld.so (/usr/aarch64-linux-gnu)
# hangs the first pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
