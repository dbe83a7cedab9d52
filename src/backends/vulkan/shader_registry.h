// The SPIR-V of every shader variant, embedded at build time (cmake/vulkan_shaders.cmake writes
// shaders_embedded.cpp). Variants are named <family>_<variant...>, e.g. "matmul_gemv_f16_vec".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace es::vk {

struct EmbeddedShader {
  const char* name;
  const uint32_t* words;
  size_t count;
};

const EmbeddedShader* EmbeddedShaders(size_t* count);
// The named variant, or nullptr when this build does not have it (e.g. a coopmat variant that
// the build's glslc could not compile).
const EmbeddedShader* FindShader(const std::string& name);

}  // namespace es::vk
