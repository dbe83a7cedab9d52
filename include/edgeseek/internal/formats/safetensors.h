// safetensors reader: a single file or a sharded set (model.safetensors.index.json), mmapped,
// header validated (JSON, dtypes, shapes, offsets inside the file and consistent with the shape).
// Tensors are views into the mappings; nothing is copied.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/core/mapped_file.h"
#include "edgeseek/internal/core/tensor.h"

namespace es {

class SafetensorsSet {
 public:
  // `path`: a folder (model.safetensors or model.safetensors.index.json inside) or a file.
  static std::unique_ptr<SafetensorsSet> Open(const std::string& path);
  // Adds one file's tensors (used by Open; exposed for tests).
  void AddFile(const std::string& file);

  const Tensor* Find(const std::string& name) const;
  // Like Find, but throws es::Error naming the tensor when absent.
  const Tensor& Get(const std::string& name) const;
  std::vector<std::string> Names() const;
  size_t size() const { return tensors_.size(); }
  size_t total_bytes() const;

 private:
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> tensor_file_;
  std::vector<std::shared_ptr<MappedFile>> files_;
};

// Parses a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...).
DType SafetensorsDType(const std::string& s, const std::string& where);

// Writes tensors (dense types) to a safetensors file (tests, synthetic exports).
void WriteSafetensors(const std::string& path, const std::vector<const Tensor*>& tensors);

}  // namespace es
