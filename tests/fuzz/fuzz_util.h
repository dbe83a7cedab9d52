// Helpers shared by the fuzz targets (tests/fuzz/targets/*.cpp, issue 21).
//
// Expand: seeds stay small (< 8 KB) but the inputs that broke parsers were big or deep (30,000
// '[' in a request, 20,000-term template chains). An input of the form
//     0xFF, count_lo, count_hi, prefix, 0x00, middle, 0x00, suffix
// stands for prefix + middle x count + suffix (count up to 65,535, the result capped at 4 MB),
// so the fuzzer can reach depth and size from a few bytes; any other input is taken as it is.
//
// TempFile: the GGUF, safetensors and tokenizer.json loaders read files (mmap), so those targets
// write the input to one file under $TMPDIR (or /tmp) first; removed when it goes away.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace es::fuzz {

inline std::string Expand(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  if (size < 3 || data[0] != 0xFF) return in;
  const size_t count = size_t(data[1]) | size_t(data[2]) << 8;
  const size_t a = in.find('\0', 3);
  if (a == std::string::npos) return in;
  const size_t b = in.find('\0', a + 1);
  if (b == std::string::npos) return in;
  const std::string prefix = in.substr(3, a - 3), middle = in.substr(a + 1, b - a - 1),
                    suffix = in.substr(b + 1);
  constexpr size_t kCap = size_t(4) << 20;
  std::string out = prefix;
  for (size_t i = 0; i < count && out.size() + middle.size() <= kCap; ++i) out += middle;
  out += suffix;
  return out;
}

class TempFile {
 public:
  explicit TempFile(const std::string& bytes, const char* suffix = "") {
    const char* dir = std::getenv("TMPDIR");
    path_ =
        std::string(dir && *dir ? dir : "/tmp") + "/es_fuzz_" + std::to_string(getpid()) + suffix;
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) std::abort();  // the harness, not the input, is broken
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
      std::abort();
    std::fclose(f);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace es::fuzz
