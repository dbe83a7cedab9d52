// GGUF writer -> reader round trips: every metadata value type, tensors of every type and rank,
// alignment, views that outlive the reader object, version 2 files, typed getters and errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    b = uint8_t(s);
  }
  return v;
}

void SetAllTypes(GgufWriter& w) {
  w.Set("general.architecture", GgufValue::Str("qwen2"));
  w.Set("t.u8", GgufValue::U8(250));
  w.Set("t.i8", GgufValue::I8(-120));
  w.Set("t.u16", GgufValue::U16(65000));
  w.Set("t.i16", GgufValue::I16(-32000));
  w.Set("t.u32", GgufValue::U32(4000000000u));
  w.Set("t.i32", GgufValue::I32(-2000000000));
  w.Set("t.u64", GgufValue::U64(18000000000000000000ull));
  w.Set("t.i64", GgufValue::I64(-9000000000000000000ll));
  w.Set("t.f32", GgufValue::F32(1e-6f));
  w.Set("t.f64", GgufValue::F64(3.141592653589793));
  w.Set("t.bool", GgufValue::Bool(true));
  w.Set("t.str", GgufValue::Str("héllo\n{{ template }}"));
  w.Set("t.empty_str", GgufValue::Str(""));
  w.Set("t.strs", GgufValue::StrArray({"a", "", "Ġthe", "<|im_end|>"}));
  w.Set("t.i32s", GgufValue::IntArray(GgufType::kI32, {1, -2, 3}));
  w.Set("t.u8s", GgufValue::IntArray(GgufType::kU8, {0, 255}));
  w.Set("t.bools", GgufValue::IntArray(GgufType::kBool, {1, 0, 1}));
  w.Set("t.f32s", GgufValue::FloatArray(GgufType::kF32, {0.5, -1.25, 1e30}));
  w.Set("t.f64s", GgufValue::FloatArray(GgufType::kF64, {0.1}));
  w.Set("t.empty_arr", GgufValue::IntArray(GgufType::kU64, {}));
  w.Set("t.nested", GgufValue::NestedArray({GgufValue::StrArray({"x", "y"}),
                                            GgufValue::IntArray(GgufType::kI16, {7})}));
  w.Set("qwen2.block_count", GgufValue::U32(28));
}

struct TensorCase {
  std::string name;
  DType type;
  Shape shape;
};

class GgufRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufRoundTrip, MetadataAndTensorsSurvive) {
  const uint32_t alignment = GetParam();
  const std::string path = test::TempDir() + "/rt.gguf";
  const std::vector<TensorCase> cases = {
      {"token_embd.weight", DType::kF16, {7, 64}},
      {"blk.0.attn_norm.weight", DType::kF32, {5}},
      {"bf", DType::kBF16, {3, 2, 3}},
      {"q8", DType::kQ8_0, {3, 64}},
      {"q40", DType::kQ4_0, {2, 2, 32}},
      {"q41", DType::kQ4_1, {1, 32}},
      {"q50", DType::kQ5_0, {3, 32}},
      {"q51", DType::kQ5_1, {1, 1, 1, 96}},
      {"q4k", DType::kQ4_K, {2, 256}},
      {"q5k", DType::kQ5_K, {1, 512}},
      {"q6k", DType::kQ6_K, {3, 256}},
      {"q8k", DType::kQ8_K, {1, 256}},
      {"i4g", DType::kI4G, {2, 384}},
      {"i4f", DType::kI4F, {3, 96}},
      {"i32", DType::kI32, {3}},
      {"i8", DType::kI8, {4, 3}},
      {"empty", DType::kF32, {0, 8}},
  };
  std::vector<std::vector<uint8_t>> data;
  {
    GgufWriter w(alignment);
    SetAllTypes(w);
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      data.push_back(
          RandomBytes(RowBytes(c.type, c.shape.back()) *
                          size_t(NumElements(c.shape) / std::max<int64_t>(c.shape.back(), 1)),
                      i + 1));
      if (c.type == DType::kF16 || c.type == DType::kBF16 || c.type == DType::kF32) {
        // keep float payloads finite-looking; bytes are compared verbatim anyway
      }
      w.AddTensor(c.name, c.type, c.shape, data.back().data());
    }
    w.WriteFile(path);
  }
  ASSERT_FALSE(std::filesystem::exists(path + ".tmp"));

  Tensor kept;
  {
    const auto f = GgufFile::Open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    GgufWriter ref(alignment);
    SetAllTypes(ref);
    ASSERT_EQ(f->metadata().size(), ref.metadata().size());
    for (size_t i = 0; i < ref.metadata().size(); ++i) {
      EXPECT_EQ(f->metadata()[i].first, ref.metadata()[i].first);
      EXPECT_TRUE(f->metadata()[i].second == ref.metadata()[i].second)
          << f->metadata()[i].first << ": " << f->metadata()[i].second.Describe() << " vs "
          << ref.metadata()[i].second.Describe();
    }
    EXPECT_EQ(f->GetU32("qwen2.block_count"), 28u);
    EXPECT_EQ(f->GetU64("t.u64"), 18000000000000000000ull);
    EXPECT_EQ(f->GetI64("t.i64"), -9000000000000000000ll);
    EXPECT_EQ(f->GetI32("t.i8"), -120);
    EXPECT_FLOAT_EQ(f->GetF32("t.f32"), 1e-6f);
    EXPECT_TRUE(f->GetBool("t.bool"));
    EXPECT_EQ(f->GetString("t.str"), "héllo\n{{ template }}");
    EXPECT_EQ(f->GetStringArray("t.strs")[2], "Ġthe");
    EXPECT_EQ(f->GetIntArray("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f->GetF32Array("t.f32s")[1], -1.25f);
    EXPECT_EQ(f->Get("t.nested").items()[0].strings()[1], "y");
    EXPECT_EQ(f->Architecture(), "qwen2");

    ASSERT_EQ(f->tensor_infos().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const GgufTensorInfo& ti = f->tensor_infos()[i];
      EXPECT_EQ(ti.name, cases[i].name);
      EXPECT_EQ(ti.dtype, cases[i].type);
      EXPECT_EQ(ti.shape, cases[i].shape);
      EXPECT_EQ(ti.offset % alignment, 0u);
      const Tensor t = f->GetTensor(cases[i].name);
      ASSERT_EQ(t.nbytes, data[i].size()) << ti.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u) << "mapping is page aligned";
      if (t.nbytes > 0) {
        EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.nbytes), 0) << ti.name;
      }
    }
    kept = f->GetTensor("q6k");
  }
  // The reader is gone; the view's owner keeps the mapping alive.
  EXPECT_EQ(std::memcmp(kept.data, data[10].data(), kept.nbytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufRoundTrip, ::testing::Values(32u, 64u, 8u));

TEST(Gguf, ShapeIsOutermostFirstAndGgufDimsInnermostFirst) {
  const std::string path = test::TempDir() + "/dims.gguf";
  std::vector<uint8_t> d(2 * 3 * 64 * 4);
  GgufWriter w;
  w.AddTensor("x", DType::kF32, {2, 3, 64}, d.data());
  w.WriteFile(path);
  const std::string bytes = test::ReadFile(path);
  // Tensor info after the 24-byte header (no metadata): name (8 + 1), n_dims, ne[0..2].
  uint32_t n_dims;
  uint64_t ne[3];
  std::memcpy(&n_dims, bytes.data() + 24 + 9, 4);
  std::memcpy(ne, bytes.data() + 24 + 13, 24);
  EXPECT_EQ(n_dims, 3u);
  EXPECT_EQ(ne[0], 64u);
  EXPECT_EQ(ne[1], 3u);
  EXPECT_EQ(ne[2], 2u);
  const auto f = GgufFile::Open(path);
  EXPECT_EQ(f->tensor_infos()[0].shape, (Shape{2, 3, 64}));
  const Tensor t = f->GetTensor("x");
  EXPECT_EQ(t.cols(), 64);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(f->GetTensor("x", {2, 3, 64}).nbytes, d.size());
  try {
    f->GetTensor("x", {2, 64, 3});  // e.g. a model expecting [n_head, embd, head_dim]
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "tensor x in " + path + " has shape [2, 3, 64], expected [2, 64, 3]");
  }
}

TEST(Gguf, ReadsVersion2) {
  // v2 and v3 share the little-endian layout; a v2 header differs only in the version field.
  const std::string dir = test::TempDir();
  std::vector<float> v = {1, 2, 3, 4};
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.AddTensor("v", DType::kF32, {4}, v.data());
  w.WriteFile(dir + "/v3.gguf");
  std::string bytes = test::ReadFile(dir + "/v3.gguf");
  bytes[4] = 2;
  test::WriteFile(dir + "/v2.gguf", bytes);
  const auto f = GgufFile::Open(dir + "/v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(ToF32(f->GetTensor("v")), v);
}

TEST(Gguf, TypedGetterErrorsNameKeyAndFile) {
  const std::string path = test::TempDir() + "/getters.gguf";
  GgufWriter w;
  w.Set("qwen2.name", GgufValue::Str("x"));
  w.Set("neg", GgufValue::I32(-1));
  w.Set("big", GgufValue::U64(1ull << 40));
  w.WriteFile(path);
  const auto f = GgufFile::Open(path);
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg([&] { f->GetU32("qwen2.block_count"); }),
            "missing key qwen2.block_count in " + path);
  EXPECT_EQ(msg([&] { f->GetU32("qwen2.name"); }),
            "key qwen2.name in " + path + ": expected an integer, found string");
  EXPECT_NE(msg([&] { f->GetU32("neg"); }).find("non-negative"), std::string::npos);
  EXPECT_NE(msg([&] { f->GetU32("big"); }).find("does not fit in uint32"), std::string::npos);
  EXPECT_NE(msg([&] { f->GetStringArray("qwen2.name"); }).find("expected an array of strings"),
            std::string::npos);
  EXPECT_EQ(msg([&] { f->GetTensor("output.weight"); }), "missing tensor output.weight in " + path);
  EXPECT_EQ(f->GetU32Or("qwen2.block_count", 7), 7u);
  EXPECT_EQ(f->GetI64("big"), int64_t(1) << 40);
}

TEST(GgufWriter, RejectsWhatLlamaCppWouldRefuse) {
  GgufWriter w;
  std::vector<uint8_t> d(64 * 34);
  EXPECT_THROW(w.AddTensor(std::string(64, 'n'), DType::kF32, {1}, d.data()),
               Error);                                                     // name too long
  EXPECT_THROW(w.AddTensor("x", DType::kQ4_0, {2, 33}, d.data()), Error);  // not a block multiple
  EXPECT_THROW(w.AddTensor("x", DType::kF32, {1, 1, 1, 1, 1}, d.data()), Error);  // 5 dims
  EXPECT_THROW(w.AddTensor("x", DType::kF8E4M3, {4}, d.data()), Error);           // no ggml type
  w.AddTensor("x", DType::kF32, {4}, d.data());
  EXPECT_THROW(w.AddTensor("x", DType::kF32, {4}, d.data()), Error);  // duplicate
  EXPECT_THROW(w.Set("general.alignment", GgufValue::U32(64)), Error);
  EXPECT_THROW(GgufWriter(48), Error);
}

TEST(GgufWriter, StreamingChecksSizesAndLeavesNoPartialFile) {
  const std::string path = test::TempDir() + "/stream.gguf";
  {
    GgufWriter w;
    w.AddTensor("a", DType::kF32, {4});
    w.AddTensor("b", DType::kF32, {2});
    w.Begin(path);
    std::vector<float> a(4, 1.0f);
    w.WriteTensorData(a.data(), 16);
    EXPECT_THROW(w.WriteTensorData(a.data(), 16), Error);  // b is 8 bytes
    EXPECT_THROW(w.Finish(), Error);                       // b never written
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufWriter, TensorsInSlicesWriteTheSameFileAsWholeTensors) {
  // Converters stream a tensor a slice of rows at a time; the file must not show it.
  const std::string dir = test::TempDir();
  std::vector<float> a(40), b(3), c(64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i);
  for (size_t i = 0; i < c.size(); ++i) c[i] = -float(i);
  b = {7, 8, 9};
  auto declare = [&](GgufWriter& w) {
    w.Set("general.architecture", GgufValue::Str("llama"));
    w.AddTensor("a", DType::kF32, {10, 4}, a.data());
    w.AddTensor("empty", DType::kF32, {0, 4}, a.data());
    w.AddTensor("b", DType::kF32, {3}, b.data());
    w.AddTensor("c", DType::kF32, {64}, c.data());
  };
  GgufWriter whole;
  declare(whole);
  whole.WriteFile(dir + "/whole.gguf");
  GgufWriter sliced;
  declare(sliced);
  sliced.Begin(dir + "/sliced.gguf");
  sliced.WriteTensorPart(a.data(), 12);  // a: 12 + 0 + 100 + 48 bytes
  sliced.WriteTensorPart(a.data() + 3, 0);
  sliced.WriteTensorPart(a.data() + 3, 100);
  sliced.WriteTensorPart(a.data() + 28, 48);
  sliced.WriteTensorData(nullptr, 0);  // empty
  sliced.WriteTensorData(b.data(), 12);
  sliced.WriteTensorPart(c.data(), 4);
  sliced.WriteTensorPart(c.data() + 1, 252);
  sliced.Finish();
  EXPECT_EQ(test::ReadFile(dir + "/sliced.gguf"), test::ReadFile(dir + "/whole.gguf"));
}

TEST(GgufWriter, SlicesPastATensorOrShortOfItAreErrors) {
  const std::string path = test::TempDir() + "/bad.gguf";
  std::vector<float> a(8);
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  {
    GgufWriter w;
    w.AddTensor("a", DType::kF32, {4});
    w.AddTensor("b", DType::kF32, {2});
    w.Begin(path);
    w.WriteTensorPart(a.data(), 12);
    EXPECT_EQ(message([&] { w.WriteTensorPart(a.data(), 8); }),
              "GGUF writer: tensor a needs 16 bytes, got 20");
    EXPECT_EQ(message([&] { w.WriteTensorData(a.data(), 4); }),
              "GGUF writer: tensor a is partly written (12 of 16 bytes); WriteTensorData takes a "
              "whole tensor");
    w.WriteTensorPart(a.data(), 4);  // a complete
    w.WriteTensorPart(a.data(), 4);  // half of b
    EXPECT_EQ(message([&] { w.Finish(); }),
              "GGUF writer: 1 declared tensors were not written (one in part)");
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufTypes, GgmlIdsMatchTheSpec) {
  EXPECT_EQ(GgmlFromDType(DType::kF32), 0u);
  EXPECT_EQ(GgmlFromDType(DType::kF16), 1u);
  EXPECT_EQ(GgmlFromDType(DType::kQ4_0), 2u);
  EXPECT_EQ(GgmlFromDType(DType::kQ4_1), 3u);
  EXPECT_EQ(GgmlFromDType(DType::kQ5_0), 6u);
  EXPECT_EQ(GgmlFromDType(DType::kQ5_1), 7u);
  EXPECT_EQ(GgmlFromDType(DType::kQ8_0), 8u);
  EXPECT_EQ(GgmlFromDType(DType::kQ4_K), 12u);
  EXPECT_EQ(GgmlFromDType(DType::kQ5_K), 13u);
  EXPECT_EQ(GgmlFromDType(DType::kQ6_K), 14u);
  EXPECT_EQ(GgmlFromDType(DType::kQ8_K), 15u);
  EXPECT_EQ(GgmlFromDType(DType::kI8), 24u);
  EXPECT_EQ(GgmlFromDType(DType::kI32), 26u);
  EXPECT_EQ(GgmlFromDType(DType::kBF16), 30u);
  for (uint32_t id : {9u, 10u, 11u, 16u, 20u, 23u, 25u, 27u, 28u, 29u, 34u, 39u, 4u, 5u, 999u})
    EXPECT_FALSE(DTypeFromGgml(id).has_value()) << id;
  for (int i = 0; i < int(DType::kCount); ++i) {
    const DType t = DType(i);
    if (t == DType::kF8E4M3) continue;
    EXPECT_EQ(DTypeFromGgml(GgmlFromDType(t)), t) << Name(t);
  }
  EXPECT_EQ(GgmlTypeName(12), "q4_K");
  EXPECT_EQ(FileTypeFor(DType::kQ8_0), 7);
  EXPECT_EQ(FileTypeFor(DType::kQ4_K), 15);
  EXPECT_EQ(FileTypeFor(DType::kI4G), -1);
  EXPECT_EQ(FileTypeFor(DType::kI4F), -1);
  EXPECT_EQ(GgmlFromDType(DType::kI4F), kGgmlTypeI4F);
  EXPECT_EQ(GgmlTypeName(kGgmlTypeI4F), "i4f(edgeseek)");
}

}  // namespace
}  // namespace es
