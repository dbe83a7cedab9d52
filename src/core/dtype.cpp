// Element type table.
#include "edgeseek/internal/core/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "edgeseek/internal/core/error.h"

namespace es {
namespace {
constexpr std::array<DTypeInfo, size_t(DType::kCount)> kInfo = {{
    {"f32", 1, 4, false},
    {"f16", 1, 2, false},
    {"bf16", 1, 2, false},
    {"f8_e4m3", 1, 1, false},
    {"i32", 1, 4, false},
    {"i8", 1, 1, false},
    {"q8_0", 32, 34, true},
    {"q4_0", 32, 18, true},
    {"q4_1", 32, 20, true},
    {"q5_0", 32, 22, true},
    {"q5_1", 32, 24, true},
    {"q4_k", 256, 144, true},
    {"q5_k", 256, 176, true},
    {"q6_k", 256, 210, true},
    {"q8_k", 256, 292, true},
    {"i4g", 128, 66, true},
    {"i4f", 32, 24, true},
}};
}  // namespace

const DTypeInfo& Info(DType t) {
  ES_ASSERT(size_t(t) < kInfo.size());
  return kInfo[size_t(t)];
}

size_t RowBytes(DType t, int64_t n) {
  const DTypeInfo& i = Info(t);
  ES_ASSERT(n % i.block_elems == 0);
  return size_t(n / i.block_elems) * size_t(i.block_bytes);
}

DType ParseDType(std::string_view s) {
  std::string low(s);
  for (char& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == low) return DType(i);
  Fail("unknown tensor type '", s, "'");
}

}  // namespace es
