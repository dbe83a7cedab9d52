# Cross-compiling edgeseek for aarch64 Linux on a Debian 12 x86-64 host (scripts/test_arm64.sh):
# g++-aarch64-linux-gnu, arm64 libraries from Debian's multiarch packages (libhwy-dev:arm64,
# libgtest-dev:arm64), and qemu-user to run what is built (try_run, gtest_discover_tests, ctest).
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
# The CPU model is chosen per run with QEMU_CPU (e.g. max, cortex-a72). No -L: the loader and
# libc must be the multiarch libc6:arm64 ones (/lib/aarch64-linux-gnu), which libhwy1:arm64 and
# libstdc++6:arm64 are linked with; mixing in the cross toolchain's ld.so (/usr/aarch64-linux-gnu)
# hangs the first pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
