// Built-in model shapes (real published configs) for synthetic models.
#pragma once

#include <string>
#include <vector>

#include "edgeseek/internal/models/config.h"

namespace es {
std::vector<std::string> PresetNames();
// Throws es::Error listing the known names when `name` is not one.
ModelConfig PresetConfig(const std::string& name);
}  // namespace es
