// GGUF model loading (issue 5): metadata -> ModelConfig, GGUF tensor names -> checkpoint names,
// tokenizer from tokenizer.ggml.*. Not implemented yet.
#include "edgeseek/core/error.h"
#include "model_loader.h"

namespace es {

std::shared_ptr<Model> LoadGgufModel(const std::string& path, const LoadOptions&) {
  Fail("'", path, "': loading models from GGUF files is not implemented yet");
}

}  // namespace es
