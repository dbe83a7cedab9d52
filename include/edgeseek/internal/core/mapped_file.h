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

  // Drops this process's resident pages of [p, p + n), rounded out to 2 MiB within the mapping,
  // when the range lies in a live MappedFile; does nothing otherwise, so heap memory is never
  // touched. Every byte stays readable: a later read faults it in again from the page cache. For
  // weights converted at load (an ONNX import's MatMulNBits blocks): their source no longer
  // counts in the RSS. Only while a model is read: once a CPU backend has moved a large file's
  // weights onto anonymous huge pages (cpu_backend.cpp MoveOntoHugePages), dropping those pages
  // would zero them.
  static void ReleasePages(const void* p, size_t n);

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;  // owned mapping (munmap in destructor)
  size_t size_ = 0;
};

}  // namespace es
