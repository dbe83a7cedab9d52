// Device profiles: schema-checked JSON files → DeviceProfile (see device_profile.h).
#include "edgeseek/internal/runtime/device_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/grammar/json_schema.h"

namespace es {
namespace fs = std::filesystem;

ProfileValue MeasuredValue(double value, const std::string& source) {
  ProfileValue p;
  p.value = value;
  p.source = source;
  p.calibrated = true;
  p.present = true;
  return p;
}
using json = nlohmann::json;

// ---- rates by weight type ----------------------------------------------------------------------

std::string DeviceProfile::RateClass(DType t, bool prefill) const {
  const bool dense_float = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
  if (backend == "vulkan") {
    // Prefill matmuls run in f16 on cooperative matrices where the device has them (README), for
    // every weight type (dequantized into the tile); decode's Q4_0 / Q8_0 GEMVs use the int8 dot
    // products, float types the f32 GEMV.
    if (prefill && f16_matrix_flops.value > 0) return "f16_matrix";
    if (!prefill && (t == DType::kQ4_0 || t == DType::kQ8_0) && int8_dot_ops.value > 0)
      return "int8_dot";
    return "fp32";
  }
  // CPU: float weights are widened to f32 and FMAd; block types quantize the activations per
  // block and take the int8 dot products (docs/cpu_kernels.md).
  if (!dense_float && int8_dot_ops.value > 0) return "int8_dot";
  return "fp32";
}

static double ClassRate(const DeviceProfile& p, const std::string& cls) {
  if (cls == "f16_matrix") return p.f16_matrix_flops.value;
  if (cls == "int8_dot") return p.int8_dot_ops.value;
  return p.fp32_flops.value;
}

double CurveRate(const std::vector<CurvePoint>& curve, double weight_bytes) {
  // Points of equal size merge into their mean; the sizes are then strictly increasing.
  std::vector<std::pair<double, double>> pts;  // (log bytes, rate)
  std::vector<int> count;
  for (const CurvePoint& c : curve) {
    if (!(c.weight_bytes > 0) || !(c.rate.value > 0)) continue;
    const double x = std::log(c.weight_bytes);
    if (!pts.empty() && pts.back().first == x) {
      pts.back().second = (pts.back().second * count.back() + c.rate.value) / (count.back() + 1);
      ++count.back();
      continue;
    }
    pts.emplace_back(x, c.rate.value);
    count.push_back(1);
  }
  if (pts.empty()) return 0;
  const double x = std::log(std::max(weight_bytes, 1.0));
  if (x <= pts.front().first) return pts.front().second;
  if (x >= pts.back().first) return pts.back().second;
  size_t i = 1;
  while (pts[i].first < x) ++i;
  const auto& [x0, r0] = pts[i - 1];
  const auto& [x1, r1] = pts[i];
  return r0 + (r1 - r0) * (x - x0) / (x1 - x0);
}

// The curve's rate for `t` at `weight_bytes`, 0 when there is no curve or no size.
static double CurveFor(const std::map<DType, std::vector<CurvePoint>>& curves, DType t,
                       double weight_bytes) {
  if (!(weight_bytes > 0)) return 0;
  auto it = curves.find(t);
  return it == curves.end() ? 0 : CurveRate(it->second, weight_bytes);
}

double DeviceProfile::GemmRate(DType t, double weight_bytes) const {
  if (const double r = CurveFor(gemm_curve, t, weight_bytes); r > 0) return r;
  auto it = gemm_flops.find(t);
  if (it != gemm_flops.end() && it->second.value > 0) return it->second.value;
  return ClassRate(*this, RateClass(t, true));
}

double DeviceProfile::GemvComputeRate(DType t) const {
  return ClassRate(*this, RateClass(t, false));
}

double DeviceProfile::GemvBytesRate(DType t, double weight_bytes) const {
  if (const double r = CurveFor(gemv_curve, t, weight_bytes); r > 0) return r;
  auto it = gemv_bytes_per_s.find(t);
  if (it != gemv_bytes_per_s.end() && it->second.value > 0) return it->second.value;
  return bandwidth.value;
}

// ---- files -----------------------------------------------------------------------------------

namespace {

std::string ExecutableDir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

// {"value", "source", "calibrated"}
ProfileValue ParseValue(const json& o) {
  ProfileValue v;
  v.value = o.at("value").get<double>();
  v.source = o.at("source").get<std::string>();
  v.calibrated = o.at("calibrated").get<bool>();
  v.present = true;
  return v;
}

ProfileValue ReadValue(const json& doc, const char* key) {
  return doc.contains(key) ? ParseValue(doc.at(key)) : ProfileValue{};
}

// The weight type a per-type entry /key/name names, or one error naming it.
DType TypeKey(const std::string& name, const char* key, const std::string& where) {
  try {
    return ParseDType(name);
  } catch (const Error&) {
    Fail("device profile ", where, ": /", key, "/", name, ": unknown weight type '", name, "'");
  }
}

std::map<DType, ProfileValue> ReadByType(const json& doc, const char* key,
                                         const std::string& where) {
  std::map<DType, ProfileValue> m;
  if (!doc.contains(key)) return m;
  for (auto& [name, o] : doc.at(key).items()) m[TypeKey(name, key, where)] = ParseValue(o);
  return m;
}

// {"q4_0": [{"k", "n", "weight_bytes", "value", "source", "calibrated"}, ...], ...}, sorted by
// weight bytes.
std::map<DType, std::vector<CurvePoint>> ReadCurves(const json& doc, const char* key,
                                                    const std::string& where) {
  std::map<DType, std::vector<CurvePoint>> m;
  const std::string at = "device profile " + where;
  if (!doc.contains(key)) return m;
  for (auto& [name, arr] : doc.at(key).items()) {
    std::vector<CurvePoint>& curve = m[TypeKey(name, key, where)];
    for (const json& o : arr) {
      CurvePoint c;
      c.k = json_field::Get<int64_t>(o, "k", at);
      c.n = json_field::Get<int64_t>(o, "n", at);
      c.weight_bytes = o.at("weight_bytes").get<double>();
      c.rate = ParseValue(o);
      curve.push_back(c);
    }
    std::stable_sort(curve.begin(), curve.end(), [](const CurvePoint& a, const CurvePoint& b) {
      return a.weight_bytes < b.weight_bytes;
    });
  }
  return m;
}

// [{"hidden", "heads", "kv_heads", "head_dim", "ffn", "type", "kv_type", "rows", "layers",
//   "depth", "value", "source", "calibrated"}, ...]
std::vector<LayerProbe> ReadLayerProbes(const json& doc, const std::string& where) {
  const std::string at = "device profile " + where;
  std::vector<LayerProbe> v;
  if (!doc.contains("layer_probes")) return v;
  for (const json& o : doc.at("layer_probes")) {
    LayerProbe p;
    p.hidden = json_field::Get<int64_t>(o, "hidden", at);
    p.heads = json_field::Get<int64_t>(o, "heads", at);
    p.kv_heads = json_field::Get<int64_t>(o, "kv_heads", at);
    p.head_dim = json_field::Get<int64_t>(o, "head_dim", at);
    p.ffn = json_field::Get<int64_t>(o, "ffn", at);
    p.type = TypeKey(o.at("type").get<std::string>(), "layer_probes", where);
    p.kv_type = TypeKey(o.at("kv_type").get<std::string>(), "layer_probes", where);
    p.rows = json_field::Get<int>(o, "rows", at);
    p.layers = json_field::Get<int>(o, "layers", at);
    p.depth = json_field::Get<int64_t>(o, "depth", at);
    p.seconds = ParseValue(o);
    v.push_back(p);
  }
  return v;
}

// [{"hidden", "vocab", "type", "value", "source", "calibrated"}, ...]
std::vector<HeadProbe> ReadHeadProbes(const json& doc, const std::string& where) {
  const std::string at = "device profile " + where;
  std::vector<HeadProbe> v;
  if (!doc.contains("head_probes")) return v;
  for (const json& o : doc.at("head_probes")) {
    HeadProbe p;
    p.hidden = json_field::Get<int64_t>(o, "hidden", at);
    p.vocab = json_field::Get<int64_t>(o, "vocab", at);
    p.type = TypeKey(o.at("type").get<std::string>(), "head_probes", where);
    p.seconds = ParseValue(o);
    v.push_back(p);
  }
  return v;
}

// [{"hidden", "ffn", "experts", "top_k", "type", "rows", "layers", "value", "source",
//   "calibrated"}, ...]
std::vector<MoeProbe> ReadMoeProbes(const json& doc, const std::string& where) {
  const std::string at = "device profile " + where;
  std::vector<MoeProbe> v;
  if (!doc.contains("moe_probes")) return v;
  for (const json& o : doc.at("moe_probes")) {
    MoeProbe p;
    p.hidden = json_field::Get<int64_t>(o, "hidden", at);
    p.ffn = json_field::Get<int64_t>(o, "ffn", at);
    p.experts = json_field::Get<int>(o, "experts", at);
    p.top_k = json_field::Get<int>(o, "top_k", at);
    p.type = TypeKey(o.at("type").get<std::string>(), "moe_probes", where);
    p.rows = json_field::Get<int>(o, "rows", at);
    p.layers = json_field::Get<int>(o, "layers", at);
    p.seconds = ParseValue(o);
    ES_CHECK(p.top_k <= p.experts, at, ": /moe_probes: top_k ", p.top_k, " is more than its ",
             p.experts, " experts");
    v.push_back(p);
  }
  return v;
}

json ValueJson(const ProfileValue& v) {
  return {{"value", v.value}, {"source", v.source}, {"calibrated", v.calibrated}};
}

json CurvesJson(const std::map<DType, std::vector<CurvePoint>>& curves) {
  json j = json::object();
  for (auto& [t, curve] : curves) {
    json arr = json::array();
    for (const CurvePoint& c : curve) {
      json o = {{"k", c.k}, {"n", c.n}, {"weight_bytes", c.weight_bytes}};
      o.update(ValueJson(c.rate));
      arr.push_back(o);
    }
    j[std::string(Name(t))] = arr;
  }
  return j;
}

}  // namespace

std::vector<std::string> DeviceProfileDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("ES_DEVICES_DIR")) dirs.push_back(env);
  const std::string exe = ExecutableDir();
  if (!exe.empty()) dirs.push_back(exe + "/../share/edgeseek/devices");
  dirs.push_back("/usr/local/share/edgeseek/devices");
  dirs.push_back("/usr/share/edgeseek/devices");
  dirs.push_back("configs/devices");
#ifdef ES_SOURCE_DIR
  dirs.push_back(std::string(ES_SOURCE_DIR) + "/configs/devices");
#endif
  return dirs;
}

std::vector<std::string> DeviceProfileNames() {
  std::vector<std::string> names;
  for (const std::string& d : DeviceProfileDirs()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() != ".json") continue;
      const std::string n = e.path().stem().string();
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string DeviceProfileSchemaPath() {
  if (const char* env = std::getenv("ES_DEVICES_SCHEMA")) return env;
  for (const std::string& d : DeviceProfileDirs()) {
    const fs::path p = fs::path(d).parent_path() / "devices.schema.json";
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
  }
  Fail(
      "device profile schema devices.schema.json not found (looked next to every profile folder; "
      "set ES_DEVICES_SCHEMA)");
}

DeviceProfile ParseDeviceProfile(const json& doc, const std::string& where) {
  static const grammar::SchemaModel schema =
      grammar::SchemaModel::Parse(json_field::ReadNamedFile(DeviceProfileSchemaPath(), "schema"));
  const auto errors = schema.Validate(doc);
  if (!errors.empty()) {
    std::string all;
    for (const auto& e : errors) all += (all.empty() ? "" : "; ") + e;
    Fail("device profile ", where, ": ", all);
  }
  DeviceProfile p;
  p.name = doc.at("name").get<std::string>();
  p.description = doc.at("description").get<std::string>();
  p.backend = doc.at("backend").get<std::string>();
  p.calibrated = doc.at("calibrated").get<bool>();
  p.memory_bytes = ReadValue(doc, "memory_bytes");
  p.reserved_bytes = ReadValue(doc, "reserved_bytes");
  p.bandwidth = ReadValue(doc, "bandwidth");
  p.f16_matrix_flops = ReadValue(doc, "f16_matrix_flops");
  p.int8_dot_ops = ReadValue(doc, "int8_dot_ops");
  p.fp32_flops = ReadValue(doc, "fp32_flops");
  p.dispatch_s = ReadValue(doc, "dispatch_s");
  p.step_s = ReadValue(doc, "step_s");
  p.link_bytes_per_s = ReadValue(doc, "link_bytes_per_s");
  p.gemm_flops = ReadByType(doc, "gemm_flops", where);
  p.gemv_bytes_per_s = ReadByType(doc, "gemv_bytes_per_s", where);
  p.gemv_curve = ReadCurves(doc, "gemv_curve", where);
  p.gemm_curve = ReadCurves(doc, "gemm_curve", where);
  p.layer_probes = ReadLayerProbes(doc, where);
  p.head_probes = ReadHeadProbes(doc, where);
  p.moe_probes = ReadMoeProbes(doc, where);
  ES_CHECK(p.bandwidth.value > 0, "device profile ", where, ": /bandwidth/value must be above 0");
  ES_CHECK(p.fp32_flops.value > 0, "device profile ", where, ": /fp32_flops/value must be above 0");
  ES_CHECK(p.memory_bytes.value > 0, "device profile ", where,
           ": /memory_bytes/value must be above 0");
  return p;
}

DeviceProfile LoadDeviceProfile(const std::string& name_or_path) {
  ES_CHECK(!name_or_path.empty(),
           "no device profile given: pass --device NAME or a profile .json path");
  std::error_code ec;
  std::string path;
  if (name_or_path.find('/') != std::string::npos ||
      fs::path(name_or_path).extension() == ".json") {
    ES_CHECK(fs::is_regular_file(name_or_path, ec), "device profile ", name_or_path,
             ": no such file");
    path = name_or_path;
  } else {
    for (const std::string& d : DeviceProfileDirs()) {
      const fs::path p = fs::path(d) / (name_or_path + ".json");
      if (fs::is_regular_file(p, ec)) {
        path = p.string();
        break;
      }
    }
    if (path.empty()) {
      std::string known;
      for (const auto& n : DeviceProfileNames()) known += (known.empty() ? "" : ", ") + n;
      Fail("unknown device profile '", name_or_path,
           "' (known: ", known.empty() ? "none found" : known, "; or a path to a profile .json)");
    }
  }
  DeviceProfile p = ParseDeviceProfile(json_field::ReadNamedFile(path, "device profile"), path);
  p.path = path;
  return p;
}

json DeviceProfileToJson(const DeviceProfile& p) {
  json j = {{"name", p.name},
            {"description", p.description},
            {"backend", p.backend},
            {"calibrated", p.calibrated}};
  auto put = [&](const char* k, const ProfileValue& v) {
    if (v.present) j[k] = ValueJson(v);
  };
  put("memory_bytes", p.memory_bytes);
  put("reserved_bytes", p.reserved_bytes);
  put("bandwidth", p.bandwidth);
  put("f16_matrix_flops", p.f16_matrix_flops);
  put("int8_dot_ops", p.int8_dot_ops);
  put("fp32_flops", p.fp32_flops);
  put("dispatch_s", p.dispatch_s);
  put("step_s", p.step_s);
  put("link_bytes_per_s", p.link_bytes_per_s);
  for (auto& [t, v] : p.gemm_flops) j["gemm_flops"][std::string(Name(t))] = ValueJson(v);
  for (auto& [t, v] : p.gemv_bytes_per_s)
    j["gemv_bytes_per_s"][std::string(Name(t))] = ValueJson(v);
  if (!p.gemv_curve.empty()) j["gemv_curve"] = CurvesJson(p.gemv_curve);
  if (!p.gemm_curve.empty()) j["gemm_curve"] = CurvesJson(p.gemm_curve);
  for (const LayerProbe& l : p.layer_probes) {
    json o = {{"hidden", l.hidden},
              {"heads", l.heads},
              {"kv_heads", l.kv_heads},
              {"head_dim", l.head_dim},
              {"ffn", l.ffn},
              {"type", std::string(Name(l.type))},
              {"kv_type", std::string(Name(l.kv_type))},
              {"rows", l.rows},
              {"layers", l.layers},
              {"depth", l.depth}};
    o.update(ValueJson(l.seconds));
    j["layer_probes"].push_back(o);
  }
  for (const HeadProbe& h : p.head_probes) {
    json o = {{"hidden", h.hidden}, {"vocab", h.vocab}, {"type", std::string(Name(h.type))}};
    o.update(ValueJson(h.seconds));
    j["head_probes"].push_back(o);
  }
  for (const MoeProbe& m : p.moe_probes) {
    json o = {{"hidden", m.hidden},
              {"ffn", m.ffn},
              {"experts", m.experts},
              {"top_k", m.top_k},
              {"type", std::string(Name(m.type))},
              {"rows", m.rows},
              {"layers", m.layers}};
    o.update(ValueJson(m.seconds));
    j["moe_probes"].push_back(o);
  }
  return j;
}

}  // namespace es
