// Read-only memory mapping of a whole file. Weights are read straight from the mapping; the
// shared_ptr returned by Open is what tensors hold as their owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace es {

class MappedFile {
 public:
  // Maps `path`; throws es::Error naming the path if it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;  // owned mapping (munmap in destructor)
  size_t size_ = 0;
};

}  // namespace es
