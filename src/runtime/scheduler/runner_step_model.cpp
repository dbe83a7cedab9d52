// WrapRunner: es::Runner seen through the engine's StepModel interface.
#include "edgeseek/core/error.h"
#include "edgeseek/runtime/engine.h"
#include "edgeseek/runtime/runner.h"

namespace es {

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
  void Forward(const Batch& batch, std::vector<float>* logits) override { r_->Forward(batch, logits); }

 private:
  std::unique_ptr<Runner> r_;
};
}  // namespace

std::unique_ptr<StepModel> WrapRunner(std::unique_ptr<Runner> runner) {
  ES_ASSERT(runner);
  return std::make_unique<RunnerStepModel>(std::move(runner));
}

}  // namespace es
