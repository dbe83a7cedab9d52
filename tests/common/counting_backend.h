// A Backend that forwards every call to another and counts what each forward brings back to the
// host: logit rows (Compute), argmax ids (ComputeArgmax) and sampled ids (ComputeSample). Tests
// use it to prove that a path reads only ids (greedy speculation: docs/speculative.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "edgeseek/internal/backends/backend.h"

namespace es::test {

struct ReadBack {
  int64_t logit_calls = 0, logit_rows = 0;    // Compute: rows of [vocab] floats to the host
  int64_t argmax_calls = 0, argmax_rows = 0;  // ComputeArgmax: one id a row
  int64_t sample_calls = 0, sample_rows = 0;  // ComputeSample: one id a row
  int64_t max_argmax_rows = 0;                // the most rows of one ComputeArgmax
};

class CountingBackend : public Backend {
 public:
  // `counts` must outlive the backend (the test reads it after the runner is gone too).
  CountingBackend(std::unique_ptr<Backend> inner, ReadBack* counts)
      : inner_(std::move(inner)), counts_(counts) {}
  std::string name() const override { return inner_->name(); }
  std::string description() const override { return inner_->description(); }
  bool Supports(const Graph& g, const Node& n) const override { return inner_->Supports(g, n); }
  void PrepareWeight(const Tensor& w) override { inner_->PrepareWeight(w); }
  void PrepareGraph(const Graph& g) override { inner_->PrepareGraph(g); }
  std::unique_ptr<KvStorage> CreateKv(const KvSpec& spec, int n_slots, int64_t capacity) override {
    return inner_->CreateKv(spec, n_slots, capacity);
  }
  std::unique_ptr<KvStorage> CreatePagedKv(const KvSpec& spec, int n_slots, int64_t capacity,
                                           int64_t n_blocks) override {
    return inner_->CreatePagedKv(spec, n_slots, capacity, n_blocks);
  }
  void Compute(const Graph& g, const Batch& batch, KvStorage& kv, float* out,
               ComputeStats* stats) override {
    ++counts_->logit_calls;
    counts_->logit_rows += int64_t(batch.out_rows.size());
    inner_->Compute(g, batch, kv, out, stats);
  }
  void ComputeArgmax(const Graph& g, const Batch& batch, KvStorage& kv, int32_t* ids,
                     ComputeStats* stats) override {
    ++counts_->argmax_calls;
    counts_->argmax_rows += int64_t(batch.out_rows.size());
    counts_->max_argmax_rows = std::max(counts_->max_argmax_rows, int64_t(batch.out_rows.size()));
    inner_->ComputeArgmax(g, batch, kv, ids, stats);
  }
  bool device_sampling() const override { return inner_->device_sampling(); }
  void ComputeSample(const Graph& g, const Batch& batch, KvStorage& kv, const RowSampling* rows,
                     int32_t* ids, ComputeStats* stats) override {
    ++counts_->sample_calls;
    counts_->sample_rows += int64_t(batch.out_rows.size());
    inner_->ComputeSample(g, batch, kv, rows, ids, stats);
  }
  DType default_kv_type() const override { return inner_->default_kv_type(); }
  size_t peak_bytes() const override { return inner_->peak_bytes(); }

 private:
  std::unique_ptr<Backend> inner_;
  ReadBack* counts_;  // not owned
};

}  // namespace es::test
