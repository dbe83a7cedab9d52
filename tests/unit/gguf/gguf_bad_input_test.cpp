// Bad GGUF input: every malformed file gives one es::Error whose single line names the file and
// the fault, never a crash (these tests also run under ASan/UBSan: see docs/gguf.md). Files are
// built byte by byte so that each fault sits exactly where the test puts it.
#include <gtest/gtest.h>

#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "test_util.h"

namespace es {
namespace {

// Little-endian byte builder for hand-made GGUF files.
struct Raw {
  std::string b;
  Raw& U8(uint8_t v) { return Bytes(&v, 1); }
  Raw& U32(uint32_t v) { return Bytes(&v, 4); }
  Raw& U64(uint64_t v) { return Bytes(&v, 8); }
  Raw& F32(float v) { return Bytes(&v, 4); }
  Raw& Str(const std::string& s) {
    U64(s.size());
    b += s;
    return *this;
  }
  Raw& Bytes(const void* p, size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Raw& PadTo(size_t a) {
    while (b.size() % a) b += '\0';
    return *this;
  }
  Raw& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b += "GGUF";
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // tensor info: dims innermost-first, as stored
  Raw& Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name).U32(uint32_t(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(type).U64(offset);
  }
};

std::string ErrorOf(const std::string& bytes, std::string* path_out = nullptr) {
  static int counter = 0;
  const std::string path = test::TempDir() + "/bad" + std::to_string(counter++) + ".gguf";
  test::WriteFile(path, bytes);
  if (path_out) *path_out = path;
  try {
    GgufFile::Open(path);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "error must be one line: " << m;
    EXPECT_EQ(m.rfind(path, 0), 0u) << "error must start with the path: " << m;
    return m;
  }
  return "no error";
}

void ExpectError(const std::string& bytes, const std::string& needle) {
  const std::string m = ErrorOf(bytes);
  EXPECT_NE(m.find(needle), std::string::npos) << "got: " << m << "\nwanted: " << needle;
}

// A valid file: 2 keys, 2 tensors (f32 [8] at 0, f32 [4, 8] at 32), 160 bytes of data.
Raw Valid() {
  Raw r;
  r.Header(2, 2).Str("general.architecture").U32(8).Str("llama");
  r.Str("tokenizer.ggml.tokens").U32(9).U32(8).U64(2).Str("a").Str("bc");
  r.Tensor("a", {8}, 0, 0).Tensor("b", {8, 4}, 0, 32).PadTo(32);
  for (int i = 0; i < 40; ++i) r.F32(float(i));
  return r;
}

TEST(GgufBad, ValidBaselineOpens) {
  const std::string path = test::TempDir() + "/ok.gguf";
  test::WriteFile(path, Valid().b);
  const auto f = GgufFile::Open(path);
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.tokens")[1], "bc");
  EXPECT_EQ(ToF32(f->GetTensor("b"))[0], 8.0f);
}

TEST(GgufBad, TruncatedAtEveryCutPoint) {
  const std::string full = Valid().b;
  int errors = 0;
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const std::string m = ErrorOf(full.substr(0, cut));
    EXPECT_NE(m, "no error") << "cut at " << cut;
    errors += m != "no error";
  }
  EXPECT_EQ(errors, int(full.size()));
}

TEST(GgufBad, TruncatedWriterOutput) {
  // A writer-made file with every value type, cut at 97 points spread over its length.
  const std::string dir = test::TempDir();
  std::vector<uint8_t> d(2 * 34);
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("qwen2"));
  w.Set("x.arr", GgufValue::NestedArray({GgufValue::StrArray({"p", "q"}),
                                         GgufValue::FloatArray(GgufType::kF64, {1})}));
  w.Set("x.f", GgufValue::F32(2));
  w.AddTensor("t", DType::kQ8_0, {2, 32}, d.data());
  w.WriteFile(dir + "/w.gguf");
  const std::string full = test::ReadFile(dir + "/w.gguf");
  // The tensor (68 bytes) is padded to 96 after it starts; the file ends at the data's end + pad.
  const size_t data_end = full.size() - (96 - 68);
  for (size_t k = 0; k < 97; ++k) {
    const size_t cut = data_end * k / 97;
    EXPECT_NE(ErrorOf(full.substr(0, cut)), "no error") << cut;
  }
}

TEST(GgufBad, Magic) {
  std::string b = Valid().b;
  b[0] = 'G';
  b[1] = 'G';
  b[2] = 'M';
  b[3] = 'L';
  ExpectError(b, "not a GGUF file (magic 'GGML', expected 'GGUF')");
  ExpectError("GG", "not a GGUF file");
}

TEST(GgufBad, Version) {
  Raw v1;
  v1.Header(0, 0, 1);
  ExpectError(v1.b, "GGUF version 1 is not supported");
  Raw v4;
  v4.Header(0, 0, 4);
  ExpectError(v4.b, "unsupported GGUF version 4");
  Raw be;
  be.Header(0, 0, 0x03000000u);
  ExpectError(be.b, "big-endian");
}

TEST(GgufBad, UnknownTensorType) {
  Raw r;
  r.Header(1, 0).Tensor("blk.0.attn_q.weight", {256, 2}, 11, 0).PadTo(32);
  r.b.append(2 * 110, '\0');
  ExpectError(
      r.b,
      "tensor 'blk.0.attn_q.weight' has tensor type id 11 (q3_K) which edgeseek does not read");
  Raw q81;
  q81.Header(1, 0).Tensor("x", {32}, 9, 0).PadTo(32);
  q81.b.append(36, '\0');
  ExpectError(q81.b, "type id 9 (q8_1)");
  Raw junk;
  junk.Header(1, 0).Tensor("x", {32}, 77777, 0).PadTo(32);
  ExpectError(junk.b, "type id 77777 (unknown)");
}

TEST(GgufBad, MisalignedOffset) {
  Raw r;
  r.Header(1, 0).Tensor("x", {4}, 0, 8).PadTo(32);
  r.b.append(64, '\0');
  ExpectError(r.b, "tensor 'x' offset 8 is not a multiple of the alignment 32");
  // general.alignment = 64 makes 32 misaligned too.
  Raw a;
  a.Header(1, 1).Str("general.alignment").U32(4).U32(64).Tensor("x", {4}, 0, 32).PadTo(64);
  a.b.append(128, '\0');
  ExpectError(a.b, "offset 32 is not a multiple of the alignment 64");
}

TEST(GgufBad, OverlappingOffsets) {
  Raw r;
  r.Header(2, 0).Tensor("first", {16}, 0, 0).Tensor("second", {16}, 0, 32).PadTo(32);
  r.b.append(128, '\0');
  // first is 64 bytes (0..64), second starts at 32.
  ExpectError(r.b, "tensor 'second' at data offset 32 overlaps tensor 'first' which ends at 64");
}

TEST(GgufBad, ShapeDisagreesWithData) {
  Raw r;
  r.Header(1, 0).Tensor("big", {64, 1000}, 0, 0).PadTo(32);
  r.b.append(1024, '\0');
  ExpectError(r.b, "tensor 'big' (256000 bytes at data offset 0) runs past the end of the file");
  Raw huge;
  huge.Header(1, 0).Tensor("huge", {1ull << 40, 1ull << 40}, 0, 0).PadTo(32);
  ExpectError(huge.b, "tensor 'huge'");
  Raw block;
  block.Header(1, 0).Tensor("q", {33, 2}, 2, 0).PadTo(32);
  block.b.append(128, '\0');
  ExpectError(
      block.b,
      "tensor 'q' of type q4_0 has rows of 33 elements, not a multiple of the block size 32");
  Raw dims;
  dims.Header(1, 0).Tensor("d", {1, 1, 1, 1, 1}, 0, 0).PadTo(32);
  ExpectError(dims.b, "tensor 'd' has 5 dims (must be 1..4)");
  Raw zero;
  zero.Header(1, 0).Tensor("z", {}, 0, 0).PadTo(32);
  ExpectError(zero.b, "tensor 'z' has 0 dims");
}

TEST(GgufBad, StringLongerThanFile) {
  Raw key;
  key.Header(0, 1).U64(1ull << 40).Bytes("general", 7);
  ExpectError(key.b, "string length 1099511627776 at offset 24 runs past the end of the file");
  Raw val;
  val.Header(0, 1).Str("tokenizer.chat_template").U32(8).U64(5000).Bytes("{%", 2);
  ExpectError(val.b, "metadata key 'tokenizer.chat_template': string length 5000");
  Raw elem;
  elem.Header(0, 1)
      .Str("tokenizer.ggml.tokens")
      .U32(9)
      .U32(8)
      .U64(2)
      .Str("ok")
      .U64(99)
      .Bytes("x", 1);
  ExpectError(elem.b, "metadata key 'tokenizer.ggml.tokens'[1]");
  Raw name;
  name.Header(1, 0).U64(1000).Bytes("blk", 3);
  name.b.append(30, '\0');
  ExpectError(name.b, "name of tensor #0: string length 1000");
}

TEST(GgufBad, CountsLargerThanTheFile) {
  Raw kv;
  kv.Header(0, 1ull << 60);
  ExpectError(kv.b, "metadata count 1152921504606846976 cannot fit");
  Raw t;
  t.Header(1ull << 50, 0);
  ExpectError(t.b, "tensor count 1125899906842624 cannot fit");
  Raw arr;
  arr.Header(0, 1).Str("a").U32(9).U32(6).U64(1ull << 61);
  ExpectError(arr.b, "metadata key 'a': array of 2305843009213693952 float32");
}

TEST(GgufBad, BadValues) {
  Raw type;
  type.Header(0, 1).Str("k").U32(13).U32(0);
  ExpectError(type.b, "metadata key 'k': unknown metadata value type 13");
  Raw elem;
  elem.Header(0, 1).Str("k").U32(9).U32(42).U64(1);
  ExpectError(elem.b, "unknown array element type 42");
  Raw boolean;
  boolean.Header(0, 1).Str("k").U32(7).U8(2);
  ExpectError(boolean.b, "bool value 2 at offset");
  Raw dup;
  dup.Header(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2);
  ExpectError(dup.b, "duplicate metadata key 'k'");
  Raw align;
  align.Header(0, 1).Str("general.alignment").U32(4).U32(48);
  ExpectError(align.b, "general.alignment 48 is not a power of two");
  Raw align_type;
  align_type.Header(0, 1).Str("general.alignment").U32(10).U64(32);
  ExpectError(align_type.b, "general.alignment must be a uint32, found uint64");
  Raw deep;
  deep.Header(0, 1).Str("k").U32(9);
  for (int i = 0; i < 10; ++i) deep.U32(9).U64(1);
  deep.U32(4).U64(0);
  ExpectError(deep.b, "arrays nested deeper than 8");
  Raw dup_t;
  dup_t.Header(2, 0).Tensor("t", {8}, 0, 0).Tensor("t", {8}, 0, 32).PadTo(32);
  dup_t.b.append(64, '\0');
  ExpectError(dup_t.b, "duplicate tensor name 't'");
}

}  // namespace
}  // namespace es
