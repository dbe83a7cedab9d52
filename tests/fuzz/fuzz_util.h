// Helpers shared by the fuzz targets (tests/fuzz/targets/*.cpp, issue 21).
//
// Expand: seeds stay small (< 8 KB) but the inputs that broke parsers were big or deep (30,000
// '[' in a request, 20,000-term template chains). An input of the form
//     0xFF, count_lo, count_hi, prefix, 0x00, middle, 0x00, suffix
// stands for prefix + middle x count + suffix (count up to 65,535, the result capped at 1 MB),
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
#include <string_view>

namespace es::fuzz {

// 1 MB: deep and big enough for every input that broke a parser (30,000 '[' is 30 KB, the
// 60,000-level JSON cases 60-120 KB, 20,000-term template chains ~200 KB); at 4 MB a mutated
// count made most executions multi-megabyte and model_config ran ~150 a second (docs/fuzzing.md).
inline constexpr size_t kExpandCap = size_t(1) << 20;

inline std::string Expand(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  if (size < 3 || data[0] != 0xFF) return in;
  const size_t count = size_t(data[1]) | size_t(data[2]) << 8;
  const size_t a = in.find('\0', 3);
  if (a == std::string::npos) return in;
  const size_t b = in.find('\0', a + 1);
  if (b == std::string::npos) return in;
  const std::string_view prefix = std::string_view(in).substr(3, a - 3),
                         middle = std::string_view(in).substr(a + 1, b - a - 1),
                         suffix = std::string_view(in).substr(b + 1);
  // The whole size first: growing the string copy by copy was most of an execution's time.
  size_t n = 0;
  while (n < count && prefix.size() + (n + 1) * middle.size() <= kExpandCap) ++n;
  if (middle.empty()) n = 0;
  std::string out;
  out.reserve(prefix.size() + n * middle.size() + suffix.size());
  out += prefix;
  for (size_t i = 0; i < n; ++i) out += middle;
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
