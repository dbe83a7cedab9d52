// Lookup of embedded shader variants by name.
#include "shader_registry.h"

#include <cstring>

namespace es::vk {

const EmbeddedShader* FindShader(const std::string& name) {
  size_t n = 0;
  const EmbeddedShader* all = EmbeddedShaders(&n);
  for (size_t i = 0; i < n; ++i)
    if (name == all[i].name) return &all[i];
  return nullptr;
}

}  // namespace es::vk
