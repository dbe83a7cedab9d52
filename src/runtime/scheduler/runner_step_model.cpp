// WrapRunner: es::Runner seen through the engine's StepModel interface.
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/sampler.h"

namespace es {

void StepModel::ForwardArgmax(const Batch& batch, std::vector<int32_t>* ids, ComputeStats* stats) {
  std::vector<float> logits;
  Forward(batch, &logits, stats);
  const size_t V = size_t(vocab_size());
  ids->resize(batch.out_rows.size());
  for (size_t r = 0; r < ids->size(); ++r) (*ids)[r] = Argmax(logits.data() + r * V, int(V));
}

void StepModel::ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                              std::vector<int32_t>* ids, ComputeStats* stats) {
  std::vector<float> logits;
  Forward(batch, &logits, stats);
  const size_t V = size_t(vocab_size());
  ids->resize(batch.out_rows.size());
  for (size_t r = 0; r < ids->size(); ++r)
    (*ids)[r] = SampleRowHost(logits.data() + r * V, int64_t(V), rows[r]);
}

bool StepModel::Push(const Batch& batch, HeadOutput out, const std::vector<RowSampling>& rows,
                     std::vector<float>* logits, std::vector<int32_t>* ids, ComputeStats* stats) {
  (void)batch, (void)out, (void)rows, (void)logits, (void)ids, (void)stats;
  Fail("this model instance keeps no decode groups in flight (one stage)");
}

namespace {
class RunnerStepModel final : public StepModel {
 public:
  explicit RunnerStepModel(std::unique_ptr<Runner> r) : r_(std::move(r)) {}
  int vocab_size() const override { return r_->model().vocab_size(); }
  int n_slots() const override { return r_->n_slots(); }
  int64_t context() const override { return r_->context(); }
  size_t kv_bytes_per_token() const override { return r_->kv_bytes_per_token(); }
  int AcquireSlot() override { return r_->AcquireSlot(); }
  void ReleaseSlot(int slot) override { r_->ReleaseSlot(slot); }
  // A backend without paging keeps CreateKv's region per slot; its pool then counts n_slots x
  // context blocks whatever the memory quota (the engine's budget still bounds their use).
  int64_t kv_blocks() const override {
    return r_->kv_paged() ? r_->kv_blocks() : StepModel::kv_blocks();
  }
  bool paged_kv() const override { return r_->kv_paged(); }
  void SetBlockTable(int slot, const std::vector<int32_t>& blocks) override {
    r_->SetBlockTable(slot, blocks);
  }
  // The CPU backend computes every row with one reduction order whatever the batch (its
  // matmuls and attention loop per row; tests/server/batch_invariance_test.mjs checks 32
  // concurrent requests against 32 sequential ones); the Vulkan
  // backend switches between GEMV and tiled (tensor-core) GEMM with the batch's row count.
  bool batch_invariant() const override { return r_->backend().name() == "cpu"; }
  void Forward(const Batch& batch, std::vector<float>* logits, ComputeStats* stats) override {
    r_->Forward(batch, logits, stats);
  }
  void ForwardArgmax(const Batch& batch, std::vector<int32_t>* ids, ComputeStats* stats) override {
    r_->ForwardArgmax(batch, ids, stats);
  }
  bool device_sampling() const override { return r_->backend().device_sampling(); }
  bool warm_up() const override { return r_->backend().name() != "cpu"; }
  int step_tokens() const override { return r_->backend().name() == "cpu" ? 256 : 1024; }
  void ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                     std::vector<int32_t>* ids, ComputeStats* stats) override {
    r_->ForwardSample(batch, rows, ids, stats);
  }
  int pipeline_stages() const override { return r_->pipelined() ? r_->pipeline_stages() : 1; }
  bool Push(const Batch& batch, HeadOutput out, const std::vector<RowSampling>& rows,
            std::vector<float>* logits, std::vector<int32_t>* ids, ComputeStats* stats) override {
    return r_->Push(batch, out, rows, logits, ids, stats);
  }
  void DropInFlight() override { r_->DropInFlight(); }

 private:
  std::unique_ptr<Runner> r_;
};
}  // namespace

std::unique_ptr<StepModel> WrapRunner(std::unique_ptr<Runner> runner) {
  ES_ASSERT(runner);
  return std::make_unique<RunnerStepModel>(std::move(runner));
}

}  // namespace es
