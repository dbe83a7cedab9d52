// GGUF writer: version 3, little-endian, tensors in declaration order with alignment padding
// (llama.cpp's loader requires each tensor's offset to be exactly where the previous one ends,
// rounded up to the alignment, so we never leave gaps).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"

namespace es {
namespace {

constexpr size_t kGgmlMaxName = 64;  // llama.cpp rejects tensor names of 64 bytes or more

void PutBytes(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <class T>
void Put(std::string& out, T v) {
  PutBytes(out, &v, sizeof(T));
}
void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

void PutScalar(std::string& out, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::kU8:
      Put<uint8_t>(out, uint8_t(i));
      break;
    case GgufType::kI8:
      Put<int8_t>(out, int8_t(i));
      break;
    case GgufType::kU16:
      Put<uint16_t>(out, uint16_t(i));
      break;
    case GgufType::kI16:
      Put<int16_t>(out, int16_t(i));
      break;
    case GgufType::kU32:
      Put<uint32_t>(out, uint32_t(i));
      break;
    case GgufType::kI32:
      Put<int32_t>(out, int32_t(i));
      break;
    case GgufType::kU64:
      Put<uint64_t>(out, uint64_t(i));
      break;
    case GgufType::kI64:
      Put<int64_t>(out, i);
      break;
    case GgufType::kBool:
      Put<uint8_t>(out, i ? 1 : 0);
      break;
    case GgufType::kF32:
      Put<float>(out, float(f));
      break;
    case GgufType::kF64:
      Put<double>(out, f);
      break;
    default:
      ES_ASSERT(false);
  }
}

void PutValue(std::string& out, const GgufValue& v) {
  if (v.type() == GgufType::kString) return PutString(out, v.AsString());
  if (!v.is_array()) {
    if (v.is_float()) return PutScalar(out, v.type(), 0, v.AsDouble());
    const int64_t i = v.type() == GgufType::kBool  ? int64_t(v.AsBool())
                      : v.type() == GgufType::kU64 ? int64_t(v.AsU64())
                                                   : v.AsI64();
    return PutScalar(out, v.type(), i, 0);
  }
  Put<uint32_t>(out, uint32_t(v.elem_type()));
  Put<uint64_t>(out, v.size());
  switch (v.elem_type()) {
    case GgufType::kString:
      for (const auto& s : v.strings()) PutString(out, s);
      break;
    case GgufType::kF32:
    case GgufType::kF64:
      for (double d : v.floats()) PutScalar(out, v.elem_type(), 0, d);
      break;
    case GgufType::kArray:
      // Each nested array is written as a bare array value: its element type, length, items.
      for (const auto& x : v.items()) PutValue(out, x);
      break;
    default:
      for (int64_t i : v.ints()) PutScalar(out, v.elem_type(), i, 0);
  }
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  ES_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0, "GGUF alignment ", alignment,
           " is not a power of two");
  if (alignment != kGgufDefaultAlignment)
    kv_.emplace_back(std::string(kKeyGeneralAlignment), GgufValue::U32(alignment));
}

GgufWriter::~GgufWriter() {
  if (fp_) {
    std::fclose(static_cast<FILE*>(fp_));
    std::remove(tmp_path_.c_str());
  }
}

void GgufWriter::Set(const std::string& key, GgufValue v) {
  ES_CHECK(key != kKeyGeneralAlignment,
           "general.alignment is set through the GgufWriter constructor");
  ES_CHECK(!key.empty(), "empty GGUF metadata key");
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::Remove(const std::string& key) {
  ES_CHECK(key != kKeyGeneralAlignment,
           "general.alignment is set through the GgufWriter constructor");
  for (size_t i = 0; i < kv_.size(); ++i)
    if (kv_[i].first == key) {
      kv_.erase(kv_.begin() + ptrdiff_t(i));
      return;
    }
}

void GgufWriter::AddTensor(const std::string& name, DType type, const Shape& shape,
                           const void* data) {
  AddTensorRaw(name, GgmlFromDType(type), type, shape, data);
}

void GgufWriter::AddTensorRaw(const std::string& name, uint32_t ggml_type, DType type,
                              const Shape& shape, const void* data) {
  ES_CHECK(fp_ == nullptr, "GGUF writer: tensors must be declared before Begin");
  ES_CHECK(!name.empty() && name.size() < kGgmlMaxName, "tensor name '", name, "' must be 1..",
           kGgmlMaxName - 1, " bytes for llama.cpp");
  ES_CHECK(!shape.empty() && shape.size() <= kGgufMaxDims, "tensor ", name, ": ", shape.size(),
           " dims (GGUF holds 1..4)");
  for (int64_t d : shape) ES_CHECK(d >= 0, "tensor ", name, ": negative dim in ", ShapeStr(shape));
  for (const auto& t : tensors_) ES_CHECK(t.name != name, "duplicate tensor name '", name, "'");
  ES_CHECK(shape.back() % BlockElems(type) == 0, "tensor ", name, " ", ShapeStr(shape),
           ": rows of ", shape.back(), " elements are not a multiple of the ", Name(type),
           " block (", BlockElems(type), ")");
  Pending p;
  p.name = name;
  p.ggml_type = ggml_type;
  p.dtype = type;
  p.shape = shape;
  const int64_t cols = shape.back();
  p.nbytes = RowBytes(type, cols) * size_t(cols == 0 ? 0 : NumElements(shape) / cols);
  p.offset =
      tensors_.empty() ? 0 : AlignUp(tensors_.back().offset + tensors_.back().nbytes, alignment_);
  p.data = data;
  tensors_.push_back(std::move(p));
}

void GgufWriter::WriteAll(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, static_cast<FILE*>(fp_)) != n)
    Fail("cannot write '", tmp_path_, "': ", std::strerror(errno));
  written_ += n;
}

void GgufWriter::Pad() {
  static const char kZeros[256] = {};
  uint64_t pad = AlignUp(written_, alignment_) - written_;
  while (pad) {
    const size_t n = size_t(std::min<uint64_t>(pad, sizeof(kZeros)));
    WriteAll(kZeros, n);
    pad -= n;
  }
}

void GgufWriter::Begin(const std::string& path) {
  ES_CHECK(fp_ == nullptr, "GGUF writer: Begin called twice");
  path_ = path;
  tmp_path_ = path + ".tmp";
  FILE* f = std::fopen(tmp_path_.c_str(), "wb");
  if (!f) Fail("cannot create '", tmp_path_, "': ", std::strerror(errno));
  fp_ = f;
  written_ = 0;
  next_tensor_ = 0;
  tensor_done_ = 0;

  std::string head;
  Put<uint32_t>(head, kGgufMagic);
  Put<uint32_t>(head, 3);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, kv_.size());
  for (const auto& [key, v] : kv_) {
    PutString(head, key);
    Put<uint32_t>(head, uint32_t(v.type()));
    PutValue(head, v);
  }
  for (const auto& t : tensors_) {
    PutString(head, t.name);
    Put<uint32_t>(head, uint32_t(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;)
      Put<uint64_t>(head, uint64_t(t.shape[d]));  // innermost first
    Put<uint32_t>(head, t.ggml_type);
    Put<uint64_t>(head, t.offset);
  }
  WriteAll(head.data(), head.size());
  Pad();
}

void GgufWriter::WriteTensorData(const void* data, size_t nbytes) {
  ES_CHECK(fp_ != nullptr, "GGUF writer: WriteTensorData before Begin");
  ES_CHECK(next_tensor_ < tensors_.size(), "GGUF writer: more tensor data than declared tensors");
  const Pending& t = tensors_[next_tensor_];
  ES_CHECK(tensor_done_ == 0, "GGUF writer: tensor ", t.name, " is partly written (", tensor_done_,
           " of ", t.nbytes, " bytes); WriteTensorData takes a whole tensor");
  ES_CHECK(nbytes == t.nbytes, "GGUF writer: tensor ", t.name, " needs ", t.nbytes, " bytes, got ",
           nbytes);
  WriteTensorPart(data, nbytes);
}

void GgufWriter::WriteTensorPart(const void* data, size_t nbytes) {
  ES_CHECK(fp_ != nullptr, "GGUF writer: WriteTensorPart before Begin");
  ES_CHECK(next_tensor_ < tensors_.size(), "GGUF writer: more tensor data than declared tensors");
  const Pending& t = tensors_[next_tensor_];
  ES_CHECK(nbytes <= t.nbytes - tensor_done_, "GGUF writer: tensor ", t.name, " needs ", t.nbytes,
           " bytes, got ", tensor_done_ + nbytes);
  WriteAll(data, nbytes);
  tensor_done_ += nbytes;
  if (tensor_done_ < t.nbytes) return;
  Pad();
  tensor_done_ = 0;
  ++next_tensor_;
}

void GgufWriter::Finish() {
  ES_CHECK(fp_ != nullptr, "GGUF writer: Finish before Begin");
  ES_CHECK(next_tensor_ == tensors_.size(), "GGUF writer: ", tensors_.size() - next_tensor_,
           " declared tensors were not written", tensor_done_ ? " (one in part)" : "");
  FILE* f = static_cast<FILE*>(fp_);
  fp_ = nullptr;
  const bool ok = std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp_path_.c_str());
    Fail("cannot write '", tmp_path_, "': ", std::strerror(errno));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    Fail("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(err));
  }
}

void GgufWriter::WriteFile(const std::string& path) {
  for (const auto& t : tensors_)
    ES_CHECK(t.data != nullptr || t.nbytes == 0, "GGUF writer: tensor ", t.name, " has no data");
  Begin(path);
  for (const auto& t : tensors_) WriteTensorData(t.data, t.nbytes);
  Finish();
}

}  // namespace es
