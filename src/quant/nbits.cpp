// onnxruntime's block-quantized weights onto edgeseek block types
// (edgeseek/internal/quant/nbits.h).
#include "edgeseek/internal/quant/nbits.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {
namespace {

float ScaleAt(const NBitsWeight& w, int64_t i) {
  switch (w.scale_type) {
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(w.scales)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(w.scales)[i]);
    default:
      return static_cast<const float*>(w.scales)[i];
  }
}

// Zero point of block b of row n (as a float: float zero points exist).
float ZeroAt(const NBitsWeight& w, int64_t n, int64_t b) {
  if (w.zp_float) {
    const int64_t i = n * w.blocks() + b;
    switch (w.scale_type) {
      case DType::kF16:
        return F16ToF32(static_cast<const uint16_t*>(w.zp_float)[i]);
      case DType::kBF16:
        return BF16ToF32(static_cast<const uint16_t*>(w.zp_float)[i]);
      default:
        return static_cast<const float*>(w.zp_float)[i];
    }
  }
  if (!w.zp_packed) return float(1 << (w.bits - 1));
  const int64_t row_bytes = (w.blocks() * w.bits + 7) / 8;
  const uint8_t* r = w.zp_packed + n * row_bytes;
  if (w.bits == 8) return float(r[b]);
  const uint8_t byte = r[b / 2];
  return float((b & 1) ? byte >> 4 : byte & 0xF);
}

int QAt(const NBitsWeight& w, int64_t n, int64_t col) {
  const int64_t blob = w.block * w.bits / 8;
  const uint8_t* p = w.q + (n * w.blocks() + col / w.block) * blob;
  const int64_t j = col % w.block;
  if (w.bits == 8) return p[j];
  const uint8_t byte = p[j / 2];
  return (j & 1) ? byte >> 4 : byte & 0xF;
}

bool F16Exact(float x) { return F16ToF32(F32ToF16(x)) == x; }

// fn(n0, n1) over row ranges of [0, rows) on the machine's cores: a load-time conversion of a
// 1.5B-parameter file is ~1 GB of blocks (threads made per weight; not a per-op path).
void ForRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t t = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                      std::max<int64_t>(1, rows / 64));
  if (t <= 1) return fn(0, rows);
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < t; ++i) threads.emplace_back(fn, rows * i / t, rows * (i + 1) / t);
  fn(0, rows / t);
  for (auto& th : threads) th.join();
}

}  // namespace

float NBitsValue(const NBitsWeight& w, int64_t row, int64_t col) {
  const int64_t b = w.g_idx ? int64_t(w.g_idx[col]) : col / w.block;
  return (float(QAt(w, row, col)) - ZeroAt(w, row, b)) * ScaleAt(w, row * w.blocks() + b);
}

Tensor NBitsToTensor(const NBitsWeight& w, std::string* why_f32) {
  ES_CHECK(w.bits == 4 || w.bits == 8, w.name, ": ", w.bits,
           "-bit weights are not supported (4 or 8)");
  ES_CHECK(w.block >= 16 && (w.block & (w.block - 1)) == 0, w.name, ": block size ", w.block,
           " is not a power of two >= 16");
  std::string why;
  if (w.g_idx) {
    for (int64_t c = 0; c < w.k && why.empty(); ++c)
      if (w.g_idx[c] != c / w.block) why = "g_idx reorders the blocks";
  }
  if (why.empty() && w.block % kQK != 0)
    why = "block size " + std::to_string(w.block) + " is below 32";
  if (why.empty() && w.k % w.block != 0)
    why = "K = " + std::to_string(w.k) + " is not a whole number of blocks";
  // Which exact type fits every block.
  const int64_t nb = w.blocks();
  const float z_sym = float(1 << (w.bits - 1));
  bool sym = true, f16_scales = true, int_zp = true;  // int_zp: every z an integer in 0..15
  for (int64_t n = 0; n < w.n && why.empty(); ++n) {
    for (int64_t b = 0; b < nb; ++b) {
      const float z = ZeroAt(w, n, b);
      if (z != z_sym) sym = false;
      if (!(z >= 0.0f && z <= 15.0f && z == float(int(z)))) int_zp = false;
      if (!F16Exact(ScaleAt(w, n * nb + b))) f16_scales = false;
    }
  }
  // Q4_1's checks only where Q4_0 does not fit (every q of every block: the costly pass).
  bool q41 = w.bits == 4 && !sym && f16_scales;
  for (int64_t n = 0; n < w.n && why.empty() && q41; ++n) {
    for (int64_t b = 0; b < nb; ++b) {
      const float s = ScaleAt(w, n * nb + b), z = ZeroAt(w, n, b);
      if (q41) {
        const float m = -s * z;
        if (!F16Exact(m) || z != float(int(z))) {
          q41 = false;
        } else {
          for (int q = 0; q < 16 && q41; ++q)
            if (float(q) * s + m != (float(q) - z) * s) q41 = false;
        }
      }
    }
  }
  // The smallest exact type: Q4_0 / Q8_0 / Q4_1 (llama.cpp's, f16 scales), else I4F (f32 scale
  // and zero point per 32: any 4-bit weight with integer zero points).
  DType type = DType::kF32;
  if (why.empty()) {
    if (w.bits == 8 && sym && f16_scales)
      type = DType::kQ8_0;
    else if (w.bits == 4 && sym && f16_scales)
      type = DType::kQ4_0;
    else if (w.bits == 4 && q41)
      type = DType::kQ4_1;
    else if (w.bits == 4 && int_zp)
      type = DType::kI4F;
    else if (w.bits == 4)
      why = "zero points that are not integers in 0..15";
    else
      why = !sym ? "8-bit zero points other than 128" : "its scales are not exact in f16";
  }
  if (why_f32) *why_f32 = why;
  Tensor out = AllocTensor(w.name, type, {w.n, w.k});
  uint8_t* dst = static_cast<uint8_t*>(MutableData(out));
  if (type == DType::kF32) {
    float* o = reinterpret_cast<float*>(dst);
    ForRows(w.n, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t c = 0; c < w.k; ++c) o[n * w.k + c] = NBitsValue(w, n, c);
    });
    return out;
  }
  const int64_t sub = w.k / kQK;  // 32-column blocks per row
  ForRows(w.n, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t s32 = 0; s32 < sub; ++s32) {
        const int64_t c0 = s32 * kQK, b = c0 / w.block;
        const float s = ScaleAt(w, n * nb + b);
        if (type == DType::kQ8_0) {
          auto* blk = reinterpret_cast<BlockQ8_0*>(dst) + n * sub + s32;
          blk->d = F32ToF16(s);
          for (int j = 0; j < kQK; ++j) blk->qs[j] = int8_t(QAt(w, n, c0 + j) - 128);
        } else if (type == DType::kQ4_0) {
          // The 16 source bytes hold columns 2j (low nibble) and 2j+1 (high); Q4_0 pairs j, j+16.
          auto* blk = reinterpret_cast<BlockQ4_0*>(dst) + n * sub + s32;
          blk->d = F32ToF16(s);
          const uint8_t* src = w.q + (n * nb + b) * (w.block / 2) + (c0 % w.block) / 2;
          uint8_t e[kQK];
          for (int j = 0; j < kQK / 2; ++j) {
            e[2 * j] = src[j] & 0xF;
            e[2 * j + 1] = src[j] >> 4;
          }
          for (int j = 0; j < kQK / 2; ++j) blk->qs[j] = uint8_t(e[j] | e[j + kQK / 2] << 4);
        } else if (type == DType::kI4F) {
          auto* blk = reinterpret_cast<BlockI4F*>(dst) + n * sub + s32;
          std::memset(blk, 0, sizeof(*blk));
          blk->d = s;
          blk->z = uint8_t(ZeroAt(w, n, b));
          for (int j = 0; j < kQK / 2; ++j)
            blk->qs[j] = uint8_t(QAt(w, n, c0 + j) | QAt(w, n, c0 + j + kQK / 2) << 4);
        } else {
          auto* blk = reinterpret_cast<BlockQ4_1*>(dst) + n * sub + s32;
          blk->d = F32ToF16(s);
          blk->m = F32ToF16(-s * ZeroAt(w, n, b));
          for (int j = 0; j < kQK / 2; ++j)
            blk->qs[j] = uint8_t(QAt(w, n, c0 + j) | QAt(w, n, c0 + j + kQK / 2) << 4);
        }
      }
    }
  });
  return out;
}

}  // namespace es
