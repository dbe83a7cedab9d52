// GGUF reader: parses the header, metadata and tensor infos of an mmapped file and validates
// every size and offset before any tensor view is handed out. Every failure is an es::Error
// naming the file and what was being read, never a crash: counts and lengths are checked
// against the bytes left before anything is allocated.
#include <algorithm>
#include <cstring>
#include <limits>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"

namespace es {
namespace {

constexpr int kMaxArrayDepth = 8;

// Bounds-checked little-endian cursor over the mapping.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  void Need(uint64_t n, const std::string& what) const {
    if (n > left())
      Fail(path_, ": truncated file: ", what, " needs ", n, " bytes at offset ", pos_,
           " but the file has ", size_, " bytes");
  }
  template <class T>
  T Read(const std::string& what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string String(const std::string& what) {
    const uint64_t n = Read<uint64_t>(what + " (string length)");
    if (n > left())
      Fail(path_, ": ", what, ": string length ", n, " at offset ", pos_ - 8,
           " runs past the end of the file (", left(), " bytes left)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

// Bytes an element of this type needs at least (for count sanity checks); 0 if invalid.
uint64_t MinSize(uint32_t t) {
  switch (GgufType(t)) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 0;
}

int64_t ReadInt(Cursor& c, GgufType t, const std::string& what, const std::string& path) {
  switch (t) {
    case GgufType::kU8:
      return c.Read<uint8_t>(what);
    case GgufType::kI8:
      return c.Read<int8_t>(what);
    case GgufType::kU16:
      return c.Read<uint16_t>(what);
    case GgufType::kI16:
      return c.Read<int16_t>(what);
    case GgufType::kU32:
      return c.Read<uint32_t>(what);
    case GgufType::kI32:
      return c.Read<int32_t>(what);
    case GgufType::kU64:
      return int64_t(c.Read<uint64_t>(what));
    case GgufType::kI64:
      return c.Read<int64_t>(what);
    case GgufType::kBool: {
      const uint8_t b = c.Read<uint8_t>(what);
      if (b > 1)
        Fail(path, ": ", what, ": bool value ", int(b), " at offset ", c.pos() - 1,
             " is neither 0 nor 1");
      return b;
    }
    default:
      ES_ASSERT(false);
  }
}

GgufValue ReadValue(Cursor& c, uint32_t type, int depth, const std::string& what,
                    const std::string& path) {
  const GgufType t = GgufType(type);
  if (MinSize(type) == 0) Fail(path, ": ", what, ": unknown metadata value type ", type);
  switch (t) {
    case GgufType::kF32:
      return GgufValue::F32(c.Read<float>(what));
    case GgufType::kF64:
      return GgufValue::F64(c.Read<double>(what));
    case GgufType::kString:
      return GgufValue::Str(c.String(what));
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth)
        Fail(path, ": ", what, ": arrays nested deeper than ", kMaxArrayDepth);
      const uint32_t et = c.Read<uint32_t>(what + " (array element type)");
      const uint64_t n = c.Read<uint64_t>(what + " (array length)");
      const uint64_t min = MinSize(et);
      if (min == 0) Fail(path, ": ", what, ": unknown array element type ", et);
      if (n > c.left() / min)
        Fail(path, ": ", what, ": array of ", n, " ", GgufTypeName(GgufType(et)), " at offset ",
             c.pos() - 12, " runs past the end of the file (", c.left(), " bytes left)");
      const GgufType e = GgufType(et);
      if (e == GgufType::kString) {
        std::vector<std::string> v;
        v.reserve(size_t(n));
        for (uint64_t i = 0; i < n; ++i)
          v.push_back(c.String(what + "[" + std::to_string(i) + "]"));
        return GgufValue::StrArray(std::move(v));
      }
      if (e == GgufType::kF32 || e == GgufType::kF64) {
        std::vector<double> v(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i)
          v[i] = e == GgufType::kF32 ? double(c.Read<float>(what)) : c.Read<double>(what);
        return GgufValue::FloatArray(e, std::move(v));
      }
      if (e == GgufType::kArray) {
        std::vector<GgufValue> v;
        v.reserve(size_t(n));
        for (uint64_t i = 0; i < n; ++i)
          v.push_back(ReadValue(c, et, depth + 1, what + "[" + std::to_string(i) + "]", path));
        return GgufValue::NestedArray(std::move(v));
      }
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) v[i] = ReadInt(c, e, what, path);
      return GgufValue::IntArray(e, std::move(v));
    }
    default:
      return GgufValue::Int(t, ReadInt(c, t, what, path));
  }
}

}  // namespace

std::shared_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  return std::make_shared<GgufFile>(MappedFile::Open(path));
}

GgufFile::GgufFile(std::shared_ptr<MappedFile> file) : file_(std::move(file)) { Parse(); }

std::string GgufFile::Where() const { return "in " + file_->path(); }

void GgufFile::Parse() {
  const std::string& path = file_->path();
  const size_t size = file_->size();
  if (size < 4) Fail(path, ": not a GGUF file (", size, " bytes, too short for the magic)");
  Cursor c(file_->data(), size, path);
  const uint32_t magic = c.Read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    char m[5] = {};
    std::memcpy(m, file_->data(), 4);
    for (char& ch : m)
      if (ch && (ch < 32 || ch > 126)) ch = '?';
    Fail(path, ": not a GGUF file (magic '", m, "', expected 'GGUF')");
  }
  version_ = c.Read<uint32_t>("version");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    Fail(path, ": big-endian GGUF files are not supported");
  if (version_ == 1) Fail(path, ": GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ != 2 && version_ != 3)
    Fail(path, ": unsupported GGUF version ", version_, " (only 2 and 3)");
  const uint64_t n_tensors = c.Read<uint64_t>("tensor count");
  const uint64_t n_kv = c.Read<uint64_t>("metadata count");
  if (n_kv > c.left() / 13)
    Fail(path, ": metadata count ", n_kv, " cannot fit in the ", c.left(),
         " bytes left (truncated or corrupt header)");

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.String("metadata key #" + std::to_string(i));
    const uint32_t type = c.Read<uint32_t>("type of metadata key '" + key + "'");
    GgufValue v = ReadValue(c, type, 0, "metadata key '" + key + "'", path);
    if (!kv_index_.emplace(key, kv_.size()).second)
      Fail(path, ": duplicate metadata key '", key, "'");
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = Find(kKeyGeneralAlignment)) {
    if (a->type() != GgufType::kU32)
      Fail(path, ": general.alignment must be a uint32, found ", GgufTypeName(a->type()));
    const uint64_t al = a->AsU64();
    if (al == 0 || (al & (al - 1)) != 0)
      Fail(path, ": general.alignment ", al, " is not a power of two");
    alignment_ = uint32_t(al);
  }

  if (n_tensors > c.left() / 24)
    Fail(path, ": tensor count ", n_tensors, " cannot fit in the ", c.left(),
         " bytes left (truncated or corrupt header)");
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.String("name of tensor #" + std::to_string(i));
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.Read<uint32_t>(what + " dims count");
    if (n_dims == 0 || n_dims > kGgufMaxDims)
      Fail(path, ": ", what, " has ", n_dims, " dims (must be 1..", kGgufMaxDims, ")");
    uint64_t ne[kGgufMaxDims] = {1, 1, 1, 1};
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = c.Read<uint64_t>(what + " dims");
      if (ne[d] > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (ne[d] != 0 && numel > uint64_t(std::numeric_limits<int64_t>::max()) / ne[d]))
        Fail(path, ": ", what, " has an impossible size (dim ", d, " = ", ne[d], ")");
      numel *= ne[d];
    }
    t.ggml_type = c.Read<uint32_t>(what + " type");
    t.offset = c.Read<uint64_t>(what + " offset");
    const std::optional<DType> dt = DTypeFromGgml(t.ggml_type);
    if (!dt)
      Fail(path, ": ", what, " has tensor type id ", t.ggml_type, " (", GgmlTypeName(t.ggml_type),
           ") which edgeseek does not read");
    t.dtype = *dt;
    // GGUF ne is innermost-first; Shape is outermost-first.
    for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(int64_t(ne[d]));
    const int be = BlockElems(t.dtype);
    if (ne[0] % uint64_t(be) != 0)
      Fail(path, ": ", what, " of type ", Name(t.dtype), " has rows of ", ne[0],
           " elements, not a multiple of the block size ", be);
    const uint64_t rows = ne[0] == 0 ? 0 : numel / ne[0];
    const uint64_t row_bytes = ne[0] / uint64_t(be) * uint64_t(Info(t.dtype).block_bytes);
    if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes)
      Fail(path, ": ", what, " has an impossible size (", ShapeStr(t.shape), " of type ",
           Name(t.dtype), ")");
    t.nbytes = size_t(row_bytes * rows);
    if (t.offset % alignment_ != 0)
      Fail(path, ": ", what, " offset ", t.offset, " is not a multiple of the alignment ",
           alignment_);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      Fail(path, ": duplicate tensor name '", t.name, "'");
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (uint64_t(c.pos()) + alignment_ - 1) / alignment_ * alignment_;
  // Every tensor inside the file, and no two overlapping.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors_[a].offset != tensors_[b].offset ? tensors_[a].offset < tensors_[b].offset
                                                    : a < b;
  });
  uint64_t prev_end = 0;
  const GgufTensorInfo* prev = nullptr;
  for (size_t idx : order) {
    const GgufTensorInfo& t = tensors_[idx];
    if (t.offset > size || data_offset_ > size - t.offset ||
        t.nbytes > size - data_offset_ - t.offset)
      Fail(path, ": tensor '", t.name, "' (", t.nbytes, " bytes at data offset ", t.offset,
           ") runs past the end of the file (truncated file? data starts at ", data_offset_,
           ", file has ", size, " bytes)");
    if (prev && t.offset < prev_end && t.nbytes > 0)
      Fail(path, ": tensor '", t.name, "' at data offset ", t.offset, " overlaps tensor '",
           prev->name, "' which ends at ", prev_end);
    if (t.offset + t.nbytes >= prev_end) {
      prev_end = t.offset + t.nbytes;
      prev = &t;
    }
  }
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::Get(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) Fail("missing key ", key, " ", Where());
  return *v;
}

namespace {
template <class F>
auto Typed(const GgufFile& f, std::string_view key, F&& fn) -> decltype(fn(f.Get(key))) {
  const GgufValue& v = f.Get(key);
  try {
    return fn(v);
  } catch (const Error& e) {
    Fail("key ", key, " in ", f.path(), ": ", e.what());
  }
}
template <class T>
T CheckedRange(int64_t v) {
  ES_CHECK(
      v >= int64_t(std::numeric_limits<T>::min()) && v <= int64_t(std::numeric_limits<T>::max()),
      "value ", v, " does not fit the expected type");
  return T(v);
}
}  // namespace

uint32_t GgufFile::GetU32(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) {
    const uint64_t u = v.AsU64();
    ES_CHECK(u <= 0xffffffffu, "value ", u, " does not fit in uint32");
    return uint32_t(u);
  });
}
int32_t GgufFile::GetI32(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return CheckedRange<int32_t>(v.AsI64()); });
}
uint64_t GgufFile::GetU64(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return v.AsU64(); });
}
int64_t GgufFile::GetI64(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return v.AsI64(); });
}
float GgufFile::GetF32(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return float(v.AsDouble()); });
}
bool GgufFile::GetBool(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return v.AsBool(); });
}
const std::string& GgufFile::GetString(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) -> const std::string& { return v.AsString(); });
}
const std::vector<std::string>& GgufFile::GetStringArray(std::string_view key) const {
  return Typed(*this, key,
               [](const GgufValue& v) -> const std::vector<std::string>& { return v.strings(); });
}
std::vector<int64_t> GgufFile::GetIntArray(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) { return v.ints(); });
}
std::vector<float> GgufFile::GetF32Array(std::string_view key) const {
  return Typed(*this, key, [](const GgufValue& v) {
    const auto& d = v.floats();
    return std::vector<float>(d.begin(), d.end());
  });
}
uint32_t GgufFile::GetU32Or(std::string_view key, uint32_t def) const {
  return Has(key) ? GetU32(key) : def;
}
float GgufFile::GetF32Or(std::string_view key, float def) const {
  return Has(key) ? GetF32(key) : def;
}
bool GgufFile::GetBoolOr(std::string_view key, bool def) const {
  return Has(key) ? GetBool(key) : def;
}
std::string GgufFile::GetStringOr(std::string_view key, const std::string& def) const {
  return Has(key) ? GetString(key) : def;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::TensorAt(size_t index) const {
  ES_ASSERT(index < tensors_.size());
  const GgufTensorInfo& i = tensors_[index];
  Tensor t;
  t.name = i.name;
  t.dtype = i.dtype;
  t.shape = i.shape;
  t.data = file_->data() + data_offset_ + i.offset;
  t.nbytes = i.nbytes;
  t.owner = std::shared_ptr<const void>(file_, t.data);  // aliasing: keeps the mapping alive
  return t;
}

Tensor GgufFile::GetTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) Fail("missing tensor ", name, " ", Where());
  return TensorAt(it->second);
}

Tensor GgufFile::GetTensor(std::string_view name, const Shape& expected) const {
  Tensor t = GetTensor(name);
  if (t.shape != expected)
    Fail("tensor ", name, " ", Where(), " has shape ", ShapeStr(t.shape), ", expected ",
         ShapeStr(expected));
  return t;
}

}  // namespace es
