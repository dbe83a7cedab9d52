// ONNX reader (edgeseek/internal/formats/onnx.h). Sections: wire-format split (where the raw_data
// bytes lie), tensors (dtype, views, external data), attributes, the graph.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>  // ONNX_API, then the generated onnx-ml.pb.h

#include <charconv>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/mapped_file.h"
#include "edgeseek/internal/formats/onnx.h"

namespace es {
namespace {

namespace fs = std::filesystem;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// ---- wire-format split ------------------------------------------------------------------------
// A message's bytes split by field: `rest` holds every field except those of `split_field`
// (re-parsable as the same message type: a message is the concatenation of its fields), and
// `parts` the payload ranges (offset from the buffer's start, length) of `split_field`.
struct Split {
  std::string rest;
  std::vector<std::pair<size_t, size_t>> parts;
};

Split SplitField(const uint8_t* data, size_t size, int split_field, const std::string& what) {
  ES_CHECK(size <= size_t(INT_MAX), what, ": larger than protobuf's 2 GB limit for one message");
  Split out;
  CodedInputStream in(data, int(size));
  in.SetRecursionLimit(100);
  for (;;) {
    const int start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      ES_CHECK(in.CurrentPosition() == int(size), what,
               ": corrupt protobuf (bad field tag at byte ", start, ")");
      break;
    }
    const int field = int(WireFormatLite::GetTagFieldNumber(tag));
    if (field == split_field &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len = 0;
      ES_CHECK(in.ReadVarint32(&len), what, ": truncated protobuf (field ", field, " at byte ",
               start, ")");
      const int at = in.CurrentPosition();
      ES_CHECK(size_t(at) + len <= size, what, ": truncated protobuf (field ", field, " at byte ",
               start, " claims ", len, " bytes, ", size - size_t(at), " left)");
      ES_CHECK(in.Skip(int(len)), what, ": truncated protobuf at byte ", at);
      out.parts.emplace_back(size_t(at), size_t(len));
      continue;
    }
    ES_CHECK(WireFormatLite::SkipField(&in, tag), what, ": truncated or corrupt protobuf (field ",
             field, " at byte ", start, ")");
    out.rest.append(reinterpret_cast<const char*>(data) + start,
                    size_t(in.CurrentPosition() - start));
  }
  return out;
}

// ---- tensors --------------------------------------------------------------------------------
struct Ctx {
  std::string path, dir;
  std::shared_ptr<MappedFile> file;
  std::map<std::string, std::shared_ptr<MappedFile>> external;
  size_t external_bytes = 0;
  size_t aligned_copies = 0, aligned_copy_bytes = 0;  // misaligned views copied (AddTensor)
};

// Element size of the types read as Tensors (0: not one of them).
size_t ElemBytes(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return 4;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    case onnx::TensorProto::INT32:
      return 4;
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
      return 1;
    default:
      return 0;
  }
}

DType TensorDType(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return DType::kF32;
    case onnx::TensorProto::FLOAT16:
      return DType::kF16;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBF16;
    case onnx::TensorProto::INT32:
      return DType::kI32;
    default:
      return DType::kI8;
  }
}

bool IsIntLike(int t) {
  return t == onnx::TensorProto::INT64 || t == onnx::TensorProto::BOOL ||
         t == onnx::TensorProto::INT16 || t == onnx::TensorProto::UINT16 ||
         t == onnx::TensorProto::UINT32 || t == onnx::TensorProto::UINT64;
}

// The bytes of an external-data tensor: a view of the mapped data file.
std::pair<const uint8_t*, std::shared_ptr<const void>> ExternalBytes(Ctx& c,
                                                                     const onnx::TensorProto& t,
                                                                     size_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  const std::string where = c.path + ": initializer '" + t.name() + "'";
  // offset / length: decimal byte counts (a file's own numbers, checked, never std::stoll's throw)
  auto count = [&](const std::string& key, const std::string& v) {
    int64_t x = -1;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
    ES_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size() && x >= 0, where,
             ": external data ", key, " '", v.substr(0, 32), "' is not a byte count");
    return x;
  };
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = count("offset", kv.value());
    else if (kv.key() == "length")
      length = count("length", kv.value());
  }
  ES_CHECK(!location.empty(), where, ": external data without a location");
  const fs::path rel(location);
  ES_CHECK(rel.is_relative() && location.find("..") == std::string::npos, where,
           ": external data location '", location, "' is not a file inside the model's folder");
  auto it = c.external.find(location);
  if (it == c.external.end()) {
    const std::string full = (fs::path(c.dir) / rel).string();
    std::error_code ec;
    ES_CHECK(fs::is_regular_file(full, ec), where, ": external data file '", full,
             "' does not exist");
    it = c.external.emplace(location, MappedFile::Open(full)).first;
    c.external_bytes += it->second->size();
  }
  const MappedFile& f = *it->second;
  ES_CHECK(offset >= 0 && (length < 0 || size_t(length) == want), where, ": external data of ",
           length, " bytes at offset ", offset, " but the shape and type need ", want);
  ES_CHECK(size_t(offset) <= f.size() && want <= f.size() - size_t(offset), where,
           ": external data file '", location, "' holds ", f.size(), " bytes, fewer than offset ",
           offset, " + ", want);
  return {f.data() + offset, std::shared_ptr<const void>(it->second, f.data())};
}

// t's shape, with its element count in *n. Element counts are bounded before anything is
// allocated: every dimension and their product below 2^40, and each reader below checks the bytes
// (or values) actually present against the count first, so a 4-byte edit of a dimension costs an
// error, not an allocation of its size.
Shape CheckedShape(const onnx::TensorProto& t, const std::string& where, int64_t* n) {
  Shape shape(t.dims().begin(), t.dims().end());
  *n = 1;
  for (int64_t d : shape) {
    ES_CHECK(d >= 0 && d < (int64_t(1) << 40), where, ": dimension ", d, " out of range");
    ES_CHECK(d == 0 || *n <= ((int64_t(1) << 40) - 1) / d, where, ": shape ", ShapeStr(shape),
             " holds more than 2^40 elements");
    *n *= d;
  }
  return shape;
}

// The n values of an integer-like tensor (int64, bool, int16/uint16/uint32/uint64), from raw_data,
// external data or the typed fields.
std::vector<int64_t> IntLikeValues(Ctx& c, const onnx::TensorProto& t, const std::string& where,
                                   int64_t n, const uint8_t* raw, size_t raw_len, bool has_raw) {
  const int et = t.data_type();
  std::vector<int64_t> v;
  if (has_raw || t.data_location() == onnx::TensorProto::EXTERNAL) {
    const size_t es = et == onnx::TensorProto::BOOL                                         ? 1
                      : (et == onnx::TensorProto::INT16 || et == onnx::TensorProto::UINT16) ? 2
                      : et == onnx::TensorProto::UINT32                                     ? 4
                                                                                            : 8;
    const uint8_t* p = raw;
    std::shared_ptr<const void> keep;
    ES_CHECK(!has_raw || raw_len == size_t(n) * es, where, ": raw_data holds ", raw_len,
             " bytes, the shape needs ", size_t(n) * es);
    if (!has_raw) std::tie(p, keep) = ExternalBytes(c, t, size_t(n) * es);
    v.assign(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t x = 0;
      if (es == 8)
        std::memcpy(&x, p + i * 8, 8);
      else if (es == 4) {
        uint32_t u;
        std::memcpy(&u, p + i * 4, 4);
        x = u;
      } else if (es == 2) {
        int16_t s;
        std::memcpy(&s, p + i * 2, 2);
        x = s;
      } else
        x = p[i];
      v[size_t(i)] = x;
    }
  } else if (et == onnx::TensorProto::INT64) {
    ES_CHECK(t.int64_data_size() == n, where, ": int64_data holds ", t.int64_data_size(),
             " values, the shape needs ", n);
    v.assign(t.int64_data().begin(), t.int64_data().end());
  } else {
    ES_CHECK(t.int32_data_size() == n, where, ": int32_data holds ", t.int32_data_size(),
             " values, the shape needs ", n);
    v.assign(t.int32_data().begin(), t.int32_data().end());
  }
  return v;
}

// A double tensor (rare: scalars), stored as f32.
Tensor DoubleTensor(const onnx::TensorProto& t, const std::string& name, const std::string& where,
                    const Shape& shape, int64_t n, const uint8_t* raw, size_t raw_len,
                    bool has_raw) {
  ES_CHECK(has_raw ? raw_len == size_t(n) * 8 : t.double_data_size() == n, where,
           ": the double data holds ", has_raw ? raw_len / 8 : size_t(t.double_data_size()),
           " values, the shape needs ", n);
  Tensor out = AllocTensor(name, DType::kF32, shape);
  float* o = static_cast<float*>(MutableData(out));
  if (has_raw) {
    ES_CHECK(raw_len == size_t(n) * 8, where, ": raw_data holds ", raw_len,
             " bytes, the shape needs ", n * 8);
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, raw + i * 8, 8);
      o[i] = float(d);
    }
  } else {
    ES_CHECK(t.double_data_size() == n, where, ": double_data holds ", t.double_data_size(),
             " values, needs ", n);
    for (int64_t i = 0; i < n; ++i) o[i] = float(t.double_data(int(i)));
  }
  return out;
}

// A tensor of `dtype` from the typed fields: float_data, or int32_data (which carries f16/bf16
// bits, int8/uint8 and int32 values one per entry), copied into storage of its own.
Tensor TypedFieldTensor(const onnx::TensorProto& t, const std::string& name,
                        const std::string& where, DType dtype, const Shape& shape, int64_t n,
                        size_t es) {
  const int et = t.data_type();
  const int have = et == onnx::TensorProto::FLOAT ? t.float_data_size() : t.int32_data_size();
  ES_CHECK(have == n, where, ": ", et == onnx::TensorProto::FLOAT ? "float_data" : "int32_data",
           " holds ", have, " values, needs ", n);
  Tensor a = AllocTensor(name, dtype, shape);
  uint8_t* o = static_cast<uint8_t*>(MutableData(a));
  if (et == onnx::TensorProto::FLOAT) {
    if (n) std::memcpy(o, t.float_data().data(), size_t(n) * es);  // empty: data() may be null
    return a;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = t.int32_data(int(i));
    if (es == 2) {
      const uint16_t h = uint16_t(x);
      std::memcpy(o + i * 2, &h, 2);
    } else if (es == 1)
      o[i] = uint8_t(x);
    else
      std::memcpy(o + i * 4, &x, 4);
  }
  return a;
}

// Stores tensor `t` (raw_data at [raw, raw + raw_len) of the mapped file when has_raw) in g under
// `name`: integer-like tensors as int_constants, float and small integer ones as constants (views
// of the mapped files where aligned, else copies).
void AddTensor(Ctx& c, OpGraph& g, const onnx::TensorProto& t, const std::string& name,
               const uint8_t* raw, size_t raw_len, bool has_raw) {
  const std::string where = c.path + ": tensor '" + name + "'";
  int64_t n = 0;
  const Shape shape = CheckedShape(t, where, &n);
  const int et = t.data_type();
  ES_CHECK(t.segment().begin() == t.segment().end() || !t.has_segment(), where,
           ": segmented tensors are not supported");
  if (IsIntLike(et)) {
    g.int_constants[name] = IntLikeValues(c, t, where, n, raw, raw_len, has_raw);
    return;
  }
  if (et == onnx::TensorProto::DOUBLE) {
    g.constants[name] = DoubleTensor(t, name, where, shape, n, raw, raw_len, has_raw);
    return;
  }
  const size_t es = ElemBytes(et);
  ES_CHECK(es != 0, where, ": element type ", et, " (", onnx::TensorProto::DataType_Name(et),
           ") is not one edgeseek reads");
  const size_t want = size_t(n) * es;
  Tensor out;
  out.name = name;
  out.shape = shape;
  out.dtype = TensorDType(et);
  if (has_raw) {
    ES_CHECK(raw_len == want, where, ": raw_data holds ", raw_len, " bytes but shape ",
             ShapeStr(shape), " of ", onnx::TensorProto::DataType_Name(et), " needs ", want);
    out.data = raw;
    out.nbytes = want;
    out.owner = std::shared_ptr<const void>(c.file, c.file->data());
  } else if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto [p, keep] = ExternalBytes(c, t, want);
    out.data = p;
    out.nbytes = want;
    out.owner = keep;
  } else {
    out = TypedFieldTensor(t, name, where, out.dtype, shape, n, es);
  }
  // A view must be aligned to its element: reading a float through a misaligned pointer is
  // undefined behaviour (x86 forgives the load; UBSan and strict-alignment CPUs do not). raw_data
  // inside the protobuf lies wherever its field landed, so such a tensor is copied into aligned
  // memory of its own; external data, written at aligned offsets by the exporters, stays mapped.
  if (es > 1 && reinterpret_cast<uintptr_t>(out.data) % es != 0) {
    Tensor a = AllocTensor(name, out.dtype, shape);
    std::memcpy(MutableData(a), out.data, want);
    out = std::move(a);
    c.aligned_copies++;
    c.aligned_copy_bytes += want;
  }
  g.constants[name] = std::move(out);
}

// Parses a TensorProto at [at, at + len) of the mapped file without copying its raw_data.
void ReadInitializer(Ctx& c, OpGraph& g, size_t at, size_t len) {
  const uint8_t* base = c.file->data() + at;
  const Split s =
      SplitField(base, len, onnx::TensorProto::kRawDataFieldNumber, c.path + ": initializer");
  onnx::TensorProto t;
  ES_CHECK(t.ParseFromString(s.rest), c.path, ": corrupt initializer at byte ", at);
  ES_CHECK(s.parts.size() <= 1, c.path, ": initializer '", t.name(), "' has ", s.parts.size(),
           " raw_data fields");
  const bool has_raw = !s.parts.empty();
  AddTensor(c, g, t, t.name(), has_raw ? base + s.parts[0].first : nullptr,
            has_raw ? s.parts[0].second : 0, has_raw);
}

// A tensor held in a message (Constant's value, an attribute): its raw_data was copied by the
// parser; copy it once more into storage of our own (small by nature).
void AddOwnedTensor(Ctx& c, OpGraph& g, const onnx::TensorProto& t, const std::string& name) {
  if (!t.has_raw_data()) {
    AddTensor(c, g, t, name, nullptr, 0, false);
    return;
  }
  auto buf = std::make_shared<std::string>(t.raw_data());
  const uint8_t* p = reinterpret_cast<const uint8_t*>(buf->data());
  AddTensor(c, g, t, name, p, buf->size(), true);
  auto it = g.constants.find(name);
  if (it != g.constants.end() && it->second.data == p) it->second.owner = buf;
}

// ---- attributes and value infos ------------------------------------------------------------
void ReadAttributes(Ctx& c, OpGraph& g, const onnx::NodeProto& n, OpNode* out) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        out->attrs[a.name()] = int64_t(a.i());
        break;
      case onnx::AttributeProto::FLOAT:
        out->attrs[a.name()] = a.f();
        break;
      case onnx::AttributeProto::STRING:
        out->attrs[a.name()] = a.s();
        break;
      case onnx::AttributeProto::INTS:
        out->attrs[a.name()] = std::vector<int64_t>(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto::FLOATS:
        out->attrs[a.name()] = std::vector<float>(a.floats().begin(), a.floats().end());
        break;
      default:
        break;  // tensors (Constant, below), graphs (If/Loop: unsupported ops), strings lists
    }
  }
}

OpValueInfo ReadValueInfo(const onnx::ValueInfoProto& v) {
  OpValueInfo o;
  o.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    o.elem_type = tt.elem_type();
    o.dtype = ElemBytes(tt.elem_type()) ? TensorDType(tt.elem_type()) : DType::kI32;
    for (const auto& d : tt.shape().dim()) {
      OpDim od;
      if (d.has_dim_value())
        od.size = d.dim_value();
      else
        od.symbol = d.dim_param();
      o.dims.push_back(od);
    }
  }
  return o;
}

}  // namespace

OpGraph ReadOnnx(const std::string& path, OnnxModelInfo* info) {
  Ctx c;
  c.path = path;
  c.dir = fs::path(path).parent_path().string();
  c.file = MappedFile::Open(path);
  ES_CHECK(c.file->size() > 0, path, ": empty file, not an ONNX model");
  // ModelProto without its graph, then the graph without its initializers.
  const Split model_split =
      SplitField(c.file->data(), c.file->size(), onnx::ModelProto::kGraphFieldNumber, path);
  onnx::ModelProto model;
  ES_CHECK(model.ParseFromString(model_split.rest), path, ": corrupt protobuf, not an ONNX model");
  ES_CHECK(model_split.parts.size() == 1, path, ": not an ONNX model (", model_split.parts.size(),
           " graphs; a model has one)");
  ES_CHECK(model.ir_version() > 0, path, ": not an ONNX model (no ir_version)");
  const size_t graph_at = model_split.parts[0].first, graph_len = model_split.parts[0].second;
  const Split graph_split = SplitField(c.file->data() + graph_at, graph_len,
                                       onnx::GraphProto::kInitializerFieldNumber, path + ": graph");
  onnx::GraphProto graph;
  ES_CHECK(graph.ParseFromString(graph_split.rest), path, ": corrupt graph");
  ES_CHECK(graph.sparse_initializer_size() == 0, path, ": sparse initializers are not supported");

  OpGraph g;
  for (const auto& o : model.opset_import())
    g.opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  for (const auto& [at, len] : graph_split.parts) ReadInitializer(c, g, graph_at + at, len);
  for (const onnx::ValueInfoProto& v : graph.input())
    if (!g.IsConstant(v.name())) g.inputs.push_back(ReadValueInfo(v));
  for (const onnx::ValueInfoProto& v : graph.output()) g.outputs.push_back(ReadValueInfo(v));
  int unnamed = 0;
  for (const onnx::NodeProto& n : graph.node()) {
    OpNode o;
    o.name = n.name().empty() ? n.op_type() + "_" + std::to_string(unnamed++) : n.name();
    o.op = n.op_type();
    o.domain = n.domain() == "ai.onnx" ? "" : n.domain();
    o.inputs.assign(n.input().begin(), n.input().end());
    o.outputs.assign(n.output().begin(), n.output().end());
    if (o.Is("Constant") && n.output_size() == 1) {
      bool done = false;
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t()) {
          AddOwnedTensor(c, g, a.t(), n.output(0));
          done = true;
        } else if (a.name() == "value_float") {
          Tensor t = AllocTensor(n.output(0), DType::kF32, {});
          *static_cast<float*>(MutableData(t)) = a.f();
          g.constants[n.output(0)] = std::move(t);
          done = true;
        } else if (a.name() == "value_int") {
          g.int_constants[n.output(0)] = {a.i()};
          done = true;
        } else if (a.name() == "value_ints") {
          g.int_constants[n.output(0)] = std::vector<int64_t>(a.ints().begin(), a.ints().end());
          done = true;
        }
      }
      ES_CHECK(done, path, ": ", o.Where(), ": a Constant kind edgeseek does not read");
      continue;
    }
    ReadAttributes(c, g, n, &o);
    g.nodes.push_back(std::move(o));
  }
  g.Reindex();
  if (info) {
    info->ir_version = model.ir_version();
    info->producer_name = model.producer_name();
    info->producer_version = model.producer_version();
    info->file_bytes = c.file->size();
    info->external_bytes = c.external_bytes;
    info->aligned_copies = c.aligned_copies;
    info->aligned_copy_bytes = c.aligned_copy_bytes;
  }
  return g;
}

}  // namespace es
