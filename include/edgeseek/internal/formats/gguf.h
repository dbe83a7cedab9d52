// GGUF files (llama.cpp's format, versions 2 and 3): metadata values, an mmapped reader that
// validates every offset and size, and a writer that produces files llama.cpp loads.
//
// File layout (little-endian):
//   "GGUF" u32 version u64 n_tensors u64 n_kv
//   n_kv x { string key, u32 value_type, value }            string = u64 length + bytes
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the tensor data; each tensor's offset is
//   relative to the start of the data section and a multiple of the alignment.
// GGUF dims are innermost-first (ne[0] is the row length, contiguous in memory); es::Shape is
// outermost-first, so a tensor with ne = {4096, 11008} is Shape {11008, 4096} here: reversed.
// Architecture keys and tensor names live in gguf_names.h (included below).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/mapped_file.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/formats/gguf_names.h"

namespace es {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;  // GGML_MAX_DIMS

// ---- Metadata value types (the u32 tags of the file).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view GgufTypeName(GgufType t);  // "uint32", "string", "array", ...

// One metadata value: a scalar, a string, or an array (of scalars, strings or arrays). Integers
// are held as 64-bit two's complement, floats as double (f32 values convert exactly).
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue U8(uint8_t v) { return Int(GgufType::kU8, v); }
  static GgufValue I8(int8_t v) { return Int(GgufType::kI8, v); }
  static GgufValue U16(uint16_t v) { return Int(GgufType::kU16, v); }
  static GgufValue I16(int16_t v) { return Int(GgufType::kI16, v); }
  static GgufValue U32(uint32_t v) { return Int(GgufType::kU32, v); }
  static GgufValue I32(int32_t v) { return Int(GgufType::kI32, v); }
  static GgufValue U64(uint64_t v) { return Int(GgufType::kU64, int64_t(v)); }
  static GgufValue I64(int64_t v) { return Int(GgufType::kI64, v); }
  static GgufValue F32(float v) { return Float(GgufType::kF32, v); }
  static GgufValue F64(double v) { return Float(GgufType::kF64, v); }
  static GgufValue Bool(bool v) { return Int(GgufType::kBool, v ? 1 : 0); }
  static GgufValue Str(std::string v);
  // Scalar of an integer type (kU8..kI64 or kBool) from its bits / a float type from a double.
  static GgufValue Int(GgufType t, int64_t v);
  static GgufValue Float(GgufType t, double v);
  // Arrays. Numeric arrays hold one number per element (ints as int64 bits, floats as double).
  static GgufValue StrArray(std::vector<std::string> v);
  static GgufValue IntArray(GgufType elem, std::vector<int64_t> v);
  static GgufValue FloatArray(GgufType elem, std::vector<double> v);
  static GgufValue NestedArray(std::vector<GgufValue> v);  // elements of type kArray

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  bool is_integer() const;  // any of the 8 integer types (not bool)
  bool is_float() const { return type_ == GgufType::kF32 || type_ == GgufType::kF64; }

  // Scalar access; each throws es::Error (naming the type it found) when the value does not
  // have a compatible type or does not fit. Integer getters accept any integer type whose value
  // fits; AsDouble accepts floats and integers.
  int64_t AsI64() const;
  uint64_t AsU64() const;
  double AsDouble() const;
  bool AsBool() const;
  const std::string& AsString() const;

  // Array access.
  GgufType elem_type() const { return elem_type_; }
  size_t size() const;                              // number of elements (arrays only; 0 otherwise)
  const std::vector<std::string>& strings() const;  // elem kString
  const std::vector<int64_t>& ints() const;         // elem integer or bool
  const std::vector<double>& floats() const;        // elem kF32/kF64
  const std::vector<GgufValue>& items() const;      // elem kArray

  // A short human-readable rendering ("uint32 28", "string 'qwen2'", "array<string>[151936]").
  std::string Describe(size_t max_items = 4) const;

  bool operator==(const GgufValue& o) const;

 private:
  GgufType type_ = GgufType::kU8;
  GgufType elem_type_ = GgufType::kU8;  // arrays only
  int64_t i_ = 0;                       // integer scalars and bool
  double f_ = 0;                        // float scalars
  std::string s_;                       // string scalar
  std::vector<std::string> strs_;       // array of strings
  std::vector<int64_t> ints_;           // array of integers / bools
  std::vector<double> floats_;          // array of floats
  std::vector<GgufValue> items_;        // array of arrays
};

// ---- Tensor types: ggml type ids <-> es::DType.
// ggml ids: F32=0 F16=1 Q4_0=2 Q4_1=3 Q5_0=6 Q5_1=7 Q8_0=8 Q8_1=9 Q2_K=10 Q3_K=11 Q4_K=12
// Q5_K=13 Q6_K=14 Q8_K=15 IQ*=16..23,29 I8=24 I16=25 I32=26 I64=27 F64=28 BF16=30 TQ1_0=34
// TQ2_0=35 MXFP4=39. edgeseek's I4G has no ggml id; it is written as kGgmlTypeI4G, a value far
// above ggml's range that llama.cpp rejects as unknown (such files are edgeseek-only). I4F
// (int4, f32 scale and zero point per 32: imported MatMulNBits of f32 models) has no exact ggml
// type either (Q4_1 holds f16 d and m) and is written as kGgmlTypeI4F, edgeseek-only as well.
inline constexpr uint32_t kGgmlTypeI4G = 1000;
inline constexpr uint32_t kGgmlTypeI4F = 1001;
// The ggml name of a type id ("q4_K", "iq2_xxs", ...) or "unknown".
std::string_view GgmlTypeName(uint32_t ggml_type);
// Maps a ggml id to a DType; std::nullopt for ids edgeseek does not read (Q8_1, Q2_K, IQ*, ...).
std::optional<DType> DTypeFromGgml(uint32_t ggml_type);
// Maps a DType to its ggml id; throws es::Error for types GGUF cannot hold (F8E4M3).
uint32_t GgmlFromDType(DType t);
// llama.cpp's general.file_type (llama_ftype) for a file whose bulk is `t`; -1 if none.
int FileTypeFor(DType t);

// ---- Reader.
struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  Shape shape;          // outermost-first (GGUF ne reversed)
  uint64_t offset = 0;  // relative to the data section
  size_t nbytes = 0;    // RowBytes(dtype, shape.back()) * rows
};

class GgufFile {
 public:
  // Maps and parses `path`; throws es::Error with one line naming the file and the fault.
  static std::shared_ptr<GgufFile> Open(const std::string& path);
  // Parses an existing mapping (tests use it for in-memory data through a temp file).
  explicit GgufFile(std::shared_ptr<MappedFile> file);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of tensor data

  // ---- Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  const GgufValue* Find(std::string_view key) const;
  // Throws "missing key KEY in FILE".
  const GgufValue& Get(std::string_view key) const;
  // Typed getters: throw "missing key KEY in FILE" or "key KEY in FILE: <type problem>".
  uint32_t GetU32(std::string_view key) const;
  int32_t GetI32(std::string_view key) const;
  uint64_t GetU64(std::string_view key) const;
  int64_t GetI64(std::string_view key) const;
  float GetF32(std::string_view key) const;
  bool GetBool(std::string_view key) const;
  const std::string& GetString(std::string_view key) const;
  const std::vector<std::string>& GetStringArray(std::string_view key) const;
  std::vector<int64_t> GetIntArray(std::string_view key) const;
  std::vector<float> GetF32Array(std::string_view key) const;
  // With a default when the key is absent (a present key of the wrong type still throws).
  uint32_t GetU32Or(std::string_view key, uint32_t def) const;
  float GetF32Or(std::string_view key, float def) const;
  bool GetBoolOr(std::string_view key, bool def) const;
  std::string GetStringOr(std::string_view key, const std::string& def) const;
  // general.architecture ("qwen2", "llama", "deepseek2").
  const std::string& Architecture() const { return GetString(kKeyGeneralArchitecture); }

  // ---- Tensors, in file order.
  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  bool HasTensor(std::string_view name) const { return FindTensor(name) != nullptr; }
  // A view into the mapping (no copy); Tensor::owner keeps the mapping alive.
  Tensor GetTensor(std::string_view name) const;  // throws "missing tensor NAME in FILE"
  // Same, checking the shape a model's metadata implies (outermost-first); throws
  // "tensor NAME in FILE has shape [a, b], expected [c, d]".
  Tensor GetTensor(std::string_view name, const Shape& expected) const;
  Tensor TensorAt(size_t index) const;
  const std::shared_ptr<MappedFile>& mapping() const { return file_; }

 private:
  void Parse();
  std::string Where() const;  // "in FILE"

  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// ---- Writer. Collect metadata and tensor declarations, then either WriteFile (all data given
// up front) or Begin / WriteTensorData or WriteTensorPart (in declaration order) / Finish for
// streaming: the header holds every tensor's offset, which follows from the declared types and
// shapes alone, so the data can then come a tensor — or a slice of one — at a time. Output is
// version 3, little-endian, tensors in declaration order each padded to the alignment (what
// llama.cpp's loader expects: offsets consecutive after padding). The file is written to PATH.tmp
// and renamed on Finish, so a failed run leaves no half file at PATH.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Sets (or replaces, keeping its position) a key. general.alignment is managed by the writer
  // (set from the constructor's alignment when it differs from 32) and is refused here.
  void Set(const std::string& key, GgufValue v);
  void Remove(const std::string& key);
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }

  // Declares a tensor (shape outermost-first, last dim a multiple of the block); `data`, if
  // given, must stay valid until WriteFile and hold exactly RowBytes(type, cols) * rows bytes.
  void AddTensor(const std::string& name, DType type, const Shape& shape,
                 const void* data = nullptr);
  // Same with an explicit ggml type id (for copying tensors verbatim).
  void AddTensorRaw(const std::string& name, uint32_t ggml_type, DType type, const Shape& shape,
                    const void* data = nullptr);
  size_t tensor_count() const { return tensors_.size(); }

  // Writes everything (every tensor must have data).
  void WriteFile(const std::string& path);
  // Streaming: header + metadata + tensor infos now, then each tensor's bytes in order.
  void Begin(const std::string& path);
  // The next tensor's bytes, whole.
  void WriteTensorData(const void* data, size_t nbytes);
  // The next `nbytes` of the tensor being written (slices in order; a tensor is complete, and
  // padded, when its declared size has arrived). A slice past the tensor's end is an error.
  void WriteTensorPart(const void* data, size_t nbytes);
  void Finish();

 private:
  struct Pending {
    std::string name;
    uint32_t ggml_type;
    DType dtype;
    Shape shape;
    size_t nbytes;
    uint64_t offset;
    const void* data;
  };
  void WriteAll(const void* p, size_t n);
  void Pad();

  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
  std::string path_, tmp_path_;
  void* fp_ = nullptr;  // FILE*, owned between Begin and Finish
  size_t next_tensor_ = 0;
  size_t tensor_done_ = 0;  // bytes of tensors_[next_tensor_] written so far
  uint64_t written_ = 0;
};

}  // namespace es
