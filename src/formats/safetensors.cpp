// safetensors: 8-byte little-endian header length, JSON header {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data region.
#include "edgeseek/internal/formats/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"

namespace es {

using nlohmann::json;
namespace fs = std::filesystem;

DType SafetensorsDType(const std::string& s, const std::string& where) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  if (s == "I32") return DType::kI32;
  if (s == "I8") return DType::kI8;
  Fail(where, ": unsupported dtype '", s, "' (supported: F32, F16, BF16, F8_E4M3, I32, I8)");
}

static const char* DTypeStr(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI32:
      return "I32";
    case DType::kI8:
      return "I8";
    default:
      Fail("safetensors cannot store type ", Name(t));
  }
}

void SafetensorsSet::AddFile(const std::string& file) {
  auto mf = MappedFile::Open(file);
  const size_t size = mf->size();
  ES_CHECK(size >= 8, file, ": truncated safetensors file (", size, " bytes, no header)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, mf->data(), 8);
  ES_CHECK(hlen <= size - 8, file, ": truncated or corrupt safetensors file (header of ", hlen,
           " bytes, file of ", size, ")");
  json h;
  const std::string_view htext(reinterpret_cast<const char*>(mf->data()) + 8, size_t(hlen));
  json_field::CheckDepth(htext, file + ": corrupt safetensors header");
  try {
    h = json::parse(htext);
  } catch (const json::exception& e) {
    Fail(file, ": corrupt safetensors header: ", e.what());
  }
  ES_CHECK(h.is_object(), file, ": corrupt safetensors header (not an object)");
  const size_t data0 = 8 + size_t(hlen);
  const size_t data_size = size - data0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, info] : h.items()) {
    if (name == "__metadata__") continue;
    std::string where = file;
    where.append(": tensor '").append(name).append("'");
    ES_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                 info.contains("data_offsets"),
             where, ": header entry needs dtype, shape and data_offsets");
    Tensor t;
    t.name = name;
    try {
      t.dtype = SafetensorsDType(info["dtype"].get<std::string>(), where);
      // The element count saturates instead of wrapping: [2^32, 2^32] once wrapped to 0 elements
      // and matched an empty data range. The nonzero dimensions' product must fit an int64 even
      // for an empty tensor ([2^62, 2^62, 0] overflowed each later element count), and
      // dimensions and offsets must be JSON integers (1e30 was cast to an integer: undefined).
      const json& shape = info["shape"];
      ES_CHECK(shape.is_array(), where, ": shape must be an array (got ", shape.type_name(), ")");
      uint64_t numel = 1;
      bool empty = false;
      for (const json& d : shape) {
        const int64_t v = json_field::As<int64_t>(d, "shape", where);
        ES_CHECK(v >= 0, where, ": negative dimension");
        t.shape.push_back(v);
        empty = empty || v == 0;
        if (v != 0) numel = numel > UINT64_MAX / uint64_t(v) ? UINT64_MAX : numel * uint64_t(v);
      }
      ES_CHECK(empty || numel <= data_size, where, ": shape ", shape.dump(),
               " holds more elements than the file has bytes (", data_size, ")");
      ES_CHECK(numel <= uint64_t(INT64_MAX), where, ": shape ", shape.dump(),
               " has dimensions whose product passes 2^63");
      const json& offsets = info["data_offsets"];
      ES_CHECK(offsets.is_array() && offsets.size() == 2, where,
               ": data_offsets must be an array [begin, end]");
      const uint64_t b = json_field::As<uint64_t>(offsets[0], "data_offsets", where);
      const uint64_t e = json_field::As<uint64_t>(offsets[1], "data_offsets", where);
      ES_CHECK(b <= e && e <= data_size, where, ": data offsets [", b, ", ", e,
               "] lie outside the file's data (", data_size, " bytes) — truncated file?");
      const size_t expect = RowBytes(t.dtype, 1) * size_t(t.numel());
      ES_CHECK(e - b == expect, where, ": holds ", e - b, " bytes but shape ", ShapeStr(t.shape),
               " of ", Name(t.dtype), " needs ", expect);
      t.data = mf->data() + data0 + b;
      t.nbytes = size_t(e - b);
      if (t.nbytes) ranges.emplace_back(b, e);
    } catch (const json::exception& ex) {
      Fail(where, ": malformed header entry: ", ex.what());
    }
    t.owner = std::shared_ptr<const void>(mf, mf->data());
    ES_CHECK(!tensors_.count(name), where, ": defined twice (also in ", tensor_file_[name], ")");
    tensor_file_[name] = file;
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    ES_CHECK(ranges[i].first >= ranges[i - 1].second, file, ": tensors overlap in the data region");
  files_.push_back(std::move(mf));
}

std::unique_ptr<SafetensorsSet> SafetensorsSet::Open(const std::string& path) {
  auto set = std::make_unique<SafetensorsSet>();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path single = fs::path(path) / "model.safetensors";
    if (fs::exists(index)) {
      const json j = json_field::ReadFile(index.string());
      ES_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
               ": missing 'weight_map'");
      std::set<std::string> shards;
      for (auto& [name, file] : j["weight_map"].items()) {
        const std::string s =
            json_field::As<std::string>(file, "weight_map['" + name + "']", index.string());
        // A shard is a file of this folder: "../x" or "/etc/x" would read any file as weights.
        ES_CHECK(!s.empty() && fs::path(s).filename().string() == s && s != "." && s != "..",
                 index.string(), ": weight_map['", name, "'] names '", s,
                 "', not a file of the model folder");
        shards.insert(s);
      }
      for (const auto& s : shards) {
        const fs::path p = fs::path(path) / s;
        ES_CHECK(fs::exists(p), index.string(), ": shard '", s, "' is missing");
        set->AddFile(p.string());
      }
      for (auto& [name, file] : j["weight_map"].items())
        ES_CHECK(set->Find(name), index.string(), ": tensor '", name, "' is not in shard '",
                 file.get<std::string>(), "'");
    } else if (fs::exists(single)) {
      set->AddFile(single.string());
    } else {
      // Any *.safetensors files in the folder.
      std::vector<std::string> files;
      for (auto& e : fs::directory_iterator(path))
        if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
      ES_CHECK(!files.empty(), path, ": no model.safetensors, index or *.safetensors files");
      std::sort(files.begin(), files.end());
      for (auto& f : files) set->AddFile(f);
    }
  } else {
    set->AddFile(path);
  }
  return set;
}

const Tensor* SafetensorsSet::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& SafetensorsSet::Get(const std::string& name) const {
  const Tensor* t = Find(name);
  ES_CHECK(t, "missing tensor '", name, "' in the checkpoint");
  return *t;
}

std::vector<std::string> SafetensorsSet::Names() const {
  std::vector<std::string> n;
  for (auto& [k, v] : tensors_) n.push_back(k);
  return n;
}

size_t SafetensorsSet::total_bytes() const {
  size_t s = 0;
  for (auto& [k, v] : tensors_) s += v.nbytes;
  return s;
}

void WriteSafetensors(const std::string& path, const std::vector<const Tensor*>& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const Tensor* t : tensors) {
    h[t->name] = {{"dtype", DTypeStr(t->dtype)},
                  {"shape", t->shape},
                  {"data_offsets", {off, off + t->nbytes}}};
    off += t->nbytes;
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  ES_CHECK(f.good(), "cannot write '", path, "'");
  const uint64_t hlen = hs.size();
  f.write(reinterpret_cast<const char*>(&hlen), 8);
  f.write(hs.data(), std::streamsize(hs.size()));
  for (const Tensor* t : tensors)
    f.write(static_cast<const char*>(t->data), std::streamsize(t->nbytes));
  ES_CHECK(f.good(), "error writing '", path, "'");
}

}  // namespace es
