// QuantizeGguf: requantize every tensor of a GGUF file by policy (see gguf_quantize.h).
#include "edgeseek/internal/formats/gguf_quantize.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {

void RequantizeRows(ThreadPool& pool, DType src_type,
                    const std::function<const uint8_t*(int64_t)>& src_row, DType dst_type,
                    int64_t rows, int64_t cols, uint8_t* out, const std::string& where,
                    const std::string& name, int64_t first_row) {
  const size_t out_row = RowBytes(dst_type, cols);
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(cols, 1));
  const size_t n = size_t(pool.size());
  std::vector<std::vector<float>> scratch(n);
  // An es::Error on a worker thread is recorded per thread; the lowest row's is rethrown here.
  std::vector<int64_t> bad_row(n, -1);
  std::vector<std::string> bad_msg(n);
  pool.ParallelFor(
      rows,
      [&](int64_t b, int64_t e, int t) {
        std::vector<float>& f = scratch[size_t(t)];
        f.resize(size_t(cols));
        for (int64_t r = b; r < e; ++r) {
          try {
            Dequantize(src_type, src_row(r), f.data(), cols);
            Quantize(dst_type, f.data(), out + size_t(r) * out_row, cols);
          } catch (const Error& err) {
            bad_row[size_t(t)] = r;
            bad_msg[size_t(t)] = err.what();
            return;
          }
        }
      },
      grain);
  int64_t first = -1;
  size_t which = 0;
  for (size_t k = 0; k < n; ++k)
    if (bad_row[k] >= 0 && (first < 0 || bad_row[k] < first)) {
      first = bad_row[k];
      which = k;
    }
  if (first >= 0) Fail(where, ": tensor ", name, " row ", first_row + first, ": ", bad_msg[which]);
}

void DropMappedPages(const void* data, size_t nbytes) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(data) + page - 1) / page * page,
                  e = (uintptr_t(data) + nbytes) / page * page;
  if (e > b)
    ::madvise(reinterpret_cast<void*>(b), e - b,
              MADV_DONTNEED);  // advisory: failure changes nothing
}

int64_t StreamStepRows(size_t in_row_bytes, size_t out_row_bytes) {
  constexpr size_t kStepBytes = size_t(8) << 20;
  return int64_t(
      std::max<size_t>(1, kStepBytes / std::max<size_t>({in_row_bytes, out_row_bytes, 1})));
}

GgufQuantizeStats QuantizeGguf(const std::string& in_path, const std::string& out_path,
                               const QuantPolicy& policy, const GgufQuantizeOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<GgufFile> in = GgufFile::Open(in_path);
  GgufWriter w(in->alignment());
  for (const auto& [key, value] : in->metadata())
    if (key != kKeyGeneralAlignment) w.Set(key, value);

  GgufQuantizeStats st;
  std::vector<DType> targets;
  bool any_quantized = false;
  for (const GgufTensorInfo& ti : in->tensor_infos()) {
    DType t = ChooseType(policy, ti.name, ti.shape, ti.dtype);
    if (t != ti.dtype && !CanQuantize(ti.dtype) && ti.dtype != DType::kF8E4M3) t = ti.dtype;
    targets.push_back(t);
    any_quantized |= IsQuantized(t);
    if (t == ti.dtype)
      w.AddTensorRaw(ti.name, ti.ggml_type, ti.dtype, ti.shape);
    else
      w.AddTensor(ti.name, t, ti.shape);
    st.in_bytes += ti.nbytes;
  }
  const int ftype = policy.file_type >= 0 ? policy.file_type : FileTypeFor(policy.default_type);
  if (ftype >= 0)
    w.Set(std::string(kKeyGeneralFileType), GgufValue::U32(uint32_t(ftype)));
  else
    w.Remove(std::string(kKeyGeneralFileType));
  if (any_quantized)
    w.Set(std::string(kKeyGeneralQuantizationVersion), GgufValue::U32(kGgmlQuantizationVersion));

  ThreadPool pool(options.threads);
  std::vector<uint8_t> out;  // one slice of re-encoded rows
  w.Begin(out_path);
  uint64_t done = 0;
  for (size_t i = 0; i < in->tensor_infos().size(); ++i) {
    const GgufTensorInfo& ti = in->tensor_infos()[i];
    const Tensor src = in->TensorAt(i);
    const DType dst_type = targets[i];
    ++st.tensors;
    ++st.out_types[dst_type];
    // A slice at a time, each slice's input pages handed back once it is written (the input is
    // mmapped): memory holds a slice, not the tensor.
    if (dst_type == ti.dtype) {
      const size_t slice = size_t(StreamStepRows(1, 1));
      if (src.nbytes == 0) w.WriteTensorData(src.data, 0);
      for (size_t off = 0; off < src.nbytes; off += slice) {
        const size_t n = std::min(slice, src.nbytes - off);
        w.WriteTensorPart(src.bytes() + off, n);
        DropMappedPages(src.bytes() + off, n);
      }
      ++st.copied;
      st.out_bytes += src.nbytes;
    } else {
      const int64_t cols = src.cols(), rows = src.rows();
      const size_t in_row = RowBytes(ti.dtype, cols), out_row = RowBytes(dst_type, cols);
      const int64_t step = StreamStepRows(in_row, out_row);
      if (rows == 0) w.WriteTensorData(src.data, 0);
      for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t n = std::min(step, rows - r0);
        const uint8_t* in_rows = src.bytes() + size_t(r0) * in_row;
        out.resize(size_t(n) * out_row);
        RequantizeRows(
            pool, ti.dtype, [&](int64_t r) { return in_rows + size_t(r) * in_row; }, dst_type, n,
            cols, out.data(), in_path, ti.name, r0);
        w.WriteTensorPart(out.data(), size_t(n) * out_row);
        DropMappedPages(in_rows, size_t(n) * in_row);
      }
      ++st.requantized;
      st.out_bytes += out_row * size_t(rows);
    }
    done += ti.nbytes;
    if (options.progress) options.progress(done, st.in_bytes, ti.name);
  }
  w.Finish();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace es
