// Generation loop.
#include "edgeseek/runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "edgeseek/core/error.h"

namespace es {

std::vector<int32_t> Generate(Runner& runner, int slot, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opts, GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  ES_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  const int vocab = runner.model().vocab_size();
  std::vector<float> logits;
  std::vector<int32_t> history = prompt, out, ids;
  Sampler sampler(opts.sampling);
  // Greedy without penalties and with nothing banned: the backend's argmax (on the device for
  // GPU backends, so only the id comes back); otherwise the logits and the sampler.
  auto banned_now = [&] {
    return int(out.size()) < opts.min_new_tokens ? opts.eos_ids : std::vector<int32_t>{};
  };
  // Other sampling on a backend that samples on the device: ComputeSample, again only the id.
  const bool device_sampling = runner.backend().device_sampling();
  std::vector<RowSampling> rows(1);
  bool have_id = false;  // the next token is ids[0] (else: sample from logits)
  auto forward = [&](const Batch& batch) {
    const std::vector<int32_t> banned = banned_now();
    have_id = true;
    if (sampler.plain_greedy() && banned.empty())
      runner.ForwardArgmax(batch, &ids);
    else if (device_sampling && sampler.DeviceParams(history, banned, &rows[0]))
      runner.ForwardSample(batch, rows, &ids);
    else {
      have_id = false;
      runner.Forward(batch, &logits);
    }
  };
  auto t0 = Clock::now();
  // Chunked prefill: logits only for the last chunk's last token.
  const int chunk = std::max(1, opts.prefill_chunk);
  for (size_t b = 0; b < prompt.size(); b += size_t(chunk)) {
    const size_t e = std::min(prompt.size(), b + size_t(chunk));
    Batch batch;
    batch.Add(slot, int64_t(b), std::vector<int32_t>(prompt.begin() + long(b), prompt.begin() + long(e)));
    batch.Finalize();
    if (e < prompt.size())
      runner.ForwardArgmax(batch, &ids);  // only the cache matters: the least to download
    else
      forward(batch);
  }
  if (stats) stats->prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t pos = int64_t(prompt.size());
  while (int(out.size()) < opts.max_new_tokens) {
    const int32_t id = have_id ? ids[0] : sampler.Sample(logits.data(), vocab, history, banned_now());
    out.push_back(id);
    history.push_back(id);
    if (opts.on_token && !opts.on_token(id)) break;
    if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), id) != opts.eos_ids.end()) {
      if (stats) stats->stopped_by_eos = true;
      break;
    }
    if (int(out.size()) >= opts.max_new_tokens) break;
    const auto ts = Clock::now();
    Batch batch;
    batch.Add(slot, pos++, {id});
    batch.Finalize();
    forward(batch);
    if (stats) stats->token_s.push_back(std::chrono::duration<double>(Clock::now() - ts).count());
  }
  return out;
}

}  // namespace es
