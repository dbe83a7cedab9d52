// GGUF metadata values and the ggml tensor-type table.
#include <cmath>
#include <limits>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"

namespace es {

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "uint8";
    case GgufType::kI8:
      return "int8";
    case GgufType::kU16:
      return "uint16";
    case GgufType::kI16:
      return "int16";
    case GgufType::kU32:
      return "uint32";
    case GgufType::kI32:
      return "int32";
    case GgufType::kF32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "uint64";
    case GgufType::kI64:
      return "int64";
    case GgufType::kF64:
      return "float64";
  }
  return "unknown";
}

namespace {
bool IsIntType(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}
}  // namespace

GgufValue GgufValue::Int(GgufType t, int64_t v) {
  ES_ASSERT(IsIntType(t) || t == GgufType::kBool);
  GgufValue g;
  g.type_ = t;
  g.i_ = v;
  return g;
}
GgufValue GgufValue::Float(GgufType t, double v) {
  ES_ASSERT(t == GgufType::kF32 || t == GgufType::kF64);
  GgufValue g;
  g.type_ = t;
  g.f_ = t == GgufType::kF32 ? double(float(v)) : v;
  return g;
}
GgufValue GgufValue::Str(std::string v) {
  GgufValue g;
  g.type_ = GgufType::kString;
  g.s_ = std::move(v);
  return g;
}
GgufValue GgufValue::StrArray(std::vector<std::string> v) {
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.elem_type_ = GgufType::kString;
  g.strs_ = std::move(v);
  return g;
}
GgufValue GgufValue::IntArray(GgufType elem, std::vector<int64_t> v) {
  ES_ASSERT(IsIntType(elem) || elem == GgufType::kBool);
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.elem_type_ = elem;
  g.ints_ = std::move(v);
  return g;
}
GgufValue GgufValue::FloatArray(GgufType elem, std::vector<double> v) {
  ES_ASSERT(elem == GgufType::kF32 || elem == GgufType::kF64);
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.elem_type_ = elem;
  if (elem == GgufType::kF32)
    for (double& d : v) d = double(float(d));
  g.floats_ = std::move(v);
  return g;
}
GgufValue GgufValue::NestedArray(std::vector<GgufValue> v) {
  for (const auto& x : v) ES_ASSERT(x.is_array());
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.elem_type_ = GgufType::kArray;
  g.items_ = std::move(v);
  return g;
}

bool GgufValue::is_integer() const { return IsIntType(type_); }

int64_t GgufValue::AsI64() const {
  ES_CHECK(is_integer(), "expected an integer, found ", GgufTypeName(type_));
  ES_CHECK(type_ != GgufType::kU64 || i_ >= 0, "value ", uint64_t(i_), " does not fit in int64");
  return i_;
}
uint64_t GgufValue::AsU64() const {
  ES_CHECK(is_integer(), "expected an integer, found ", GgufTypeName(type_));
  if (type_ == GgufType::kU64) return uint64_t(i_);
  ES_CHECK(i_ >= 0, "expected a non-negative integer, found ", i_);
  return uint64_t(i_);
}
double GgufValue::AsDouble() const {
  if (is_float()) return f_;
  if (type_ == GgufType::kU64) return double(uint64_t(i_));
  if (is_integer()) return double(i_);
  Fail("expected a number, found ", GgufTypeName(type_));
}
bool GgufValue::AsBool() const {
  ES_CHECK(type_ == GgufType::kBool, "expected a bool, found ", GgufTypeName(type_));
  return i_ != 0;
}
const std::string& GgufValue::AsString() const {
  ES_CHECK(type_ == GgufType::kString, "expected a string, found ", GgufTypeName(type_));
  return s_;
}

size_t GgufValue::size() const {
  if (!is_array()) return 0;
  switch (elem_type_) {
    case GgufType::kString:
      return strs_.size();
    case GgufType::kF32:
    case GgufType::kF64:
      return floats_.size();
    case GgufType::kArray:
      return items_.size();
    default:
      return ints_.size();
  }
}
const std::vector<std::string>& GgufValue::strings() const {
  ES_CHECK(is_array() && elem_type_ == GgufType::kString, "expected an array of strings, found ",
           is_array() ? "array of " : "", GgufTypeName(is_array() ? elem_type_ : type_));
  return strs_;
}
const std::vector<int64_t>& GgufValue::ints() const {
  ES_CHECK(is_array() && (IsIntType(elem_type_) || elem_type_ == GgufType::kBool),
           "expected an array of integers, found ", is_array() ? "array of " : "",
           GgufTypeName(is_array() ? elem_type_ : type_));
  return ints_;
}
const std::vector<double>& GgufValue::floats() const {
  ES_CHECK(is_array() && (elem_type_ == GgufType::kF32 || elem_type_ == GgufType::kF64),
           "expected an array of floats, found ", is_array() ? "array of " : "",
           GgufTypeName(is_array() ? elem_type_ : type_));
  return floats_;
}
const std::vector<GgufValue>& GgufValue::items() const {
  ES_CHECK(is_array() && elem_type_ == GgufType::kArray, "expected an array of arrays, found ",
           is_array() ? "array of " : "", GgufTypeName(is_array() ? elem_type_ : type_));
  return items_;
}

std::string GgufValue::Describe(size_t max_items) const {
  std::ostringstream os;
  if (!is_array()) {
    os << GgufTypeName(type_) << ' ';
    if (type_ == GgufType::kString) {
      std::string s = s_.size() > 60 ? s_.substr(0, 57) + "..." : s_;
      for (char& c : s)
        if (c == '\n') c = ' ';
      os << '\'' << s << '\'';
    } else if (type_ == GgufType::kBool) {
      os << (i_ ? "true" : "false");
    } else if (is_float()) {
      os << f_;
    } else if (type_ == GgufType::kU64) {
      os << uint64_t(i_);
    } else {
      os << i_;
    }
    return os.str();
  }
  os << "array<" << GgufTypeName(elem_type_) << ">[" << size() << "]";
  const size_t n = std::min(size(), max_items);
  if (n == 0) return os.str();
  os << " {";
  for (size_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    switch (elem_type_) {
      case GgufType::kString:
        os << '\'' << strs_[i] << '\'';
        break;
      case GgufType::kF32:
      case GgufType::kF64:
        os << floats_[i];
        break;
      case GgufType::kArray:
        os << items_[i].Describe(max_items);
        break;
      case GgufType::kU64:
        os << uint64_t(ints_[i]);
        break;
      default:
        os << ints_[i];
    }
  }
  if (size() > n) os << ", ...";
  os << '}';
  return os.str();
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type_ != o.type_) return false;
  if (!is_array()) {
    if (is_float()) return f_ == o.f_ || (std::isnan(f_) && std::isnan(o.f_));
    return i_ == o.i_ && s_ == o.s_;
  }
  return elem_type_ == o.elem_type_ && strs_ == o.strs_ && ints_ == o.ints_ &&
         floats_ == o.floats_ && items_ == o.items_;
}

// ---- ggml tensor types.
std::string_view GgmlTypeName(uint32_t t) {
  static const char* const kNames[] = {"f32",
                                       "f16",
                                       "q4_0",
                                       "q4_1",
                                       "q4_2(removed)",
                                       "q4_3(removed)",
                                       "q5_0",
                                       "q5_1",
                                       "q8_0",
                                       "q8_1",
                                       "q2_K",
                                       "q3_K",
                                       "q4_K",
                                       "q5_K",
                                       "q6_K",
                                       "q8_K",
                                       "iq2_xxs",
                                       "iq2_xs",
                                       "iq3_xxs",
                                       "iq1_s",
                                       "iq4_nl",
                                       "iq3_s",
                                       "iq2_s",
                                       "iq4_xs",
                                       "i8",
                                       "i16",
                                       "i32",
                                       "i64",
                                       "f64",
                                       "iq1_m",
                                       "bf16",
                                       "q4_0_4_4(removed)",
                                       "q4_0_4_8(removed)",
                                       "q4_0_8_8(removed)",
                                       "tq1_0",
                                       "tq2_0",
                                       "iq4_nl_4_4(removed)",
                                       "iq4_nl_4_8(removed)",
                                       "iq4_nl_8_8(removed)",
                                       "mxfp4"};
  if (t < sizeof(kNames) / sizeof(kNames[0])) return kNames[t];
  if (t == kGgmlTypeI4G) return "i4g(edgeseek)";
  if (t == kGgmlTypeI4F) return "i4f(edgeseek)";
  return "unknown";
}

std::optional<DType> DTypeFromGgml(uint32_t t) {
  switch (t) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 6:
      return DType::kQ5_0;
    case 7:
      return DType::kQ5_1;
    case 8:
      return DType::kQ8_0;
    case 12:
      return DType::kQ4_K;
    case 13:
      return DType::kQ5_K;
    case 14:
      return DType::kQ6_K;
    case 15:
      return DType::kQ8_K;
    case 24:
      return DType::kI8;
    case 26:
      return DType::kI32;
    case 30:
      return DType::kBF16;
    case kGgmlTypeI4G:
      return DType::kI4G;
    case kGgmlTypeI4F:
      return DType::kI4F;
    default:
      return std::nullopt;
  }
}

uint32_t GgmlFromDType(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 6;
    case DType::kQ5_1:
      return 7;
    case DType::kQ8_0:
      return 8;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kQ8_K:
      return 15;
    case DType::kI8:
      return 24;
    case DType::kI32:
      return 26;
    case DType::kBF16:
      return 30;
    case DType::kI4G:
      return kGgmlTypeI4G;
    case DType::kI4F:
      return kGgmlTypeI4F;
    default:
      Fail("tensor type ", Name(t), " cannot be stored in GGUF");
  }
}

int FileTypeFor(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 7;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ4_K:
      return 15;  // MOSTLY_Q4_K_M
    case DType::kQ5_K:
      return 17;  // MOSTLY_Q5_K_M
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    default:
      return -1;
  }
}

}  // namespace es
