// One request in flight, seen from the HTTP side: the event channel the engine thread fills,
// and the text pipeline (detokenizer → TextFilter: stop strings, reasoning split) that turns
// token events into deltas. Also the Chrome-trace export of a finished request.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/text_pipeline.h"
#include "edgeseek/internal/server/server.h"

namespace es::server {

// Events from the engine thread to the handler thread.
class EventChannel {
 public:
  void Push(const SeqEvent& e);
  // Moves all pending events into `out`; waits up to `seconds` when there are none.
  void Drain(std::vector<SeqEvent>* out, double seconds);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqEvent> events_;
};

// A token's log-probabilities as the engine computed them (requests with logprobs).
struct TokenLogprob {
  int32_t token = -1;
  std::shared_ptr<const TokenLogprobs> lp;
};

struct Delta {
  std::string reasoning, content;
  std::vector<TokenLogprob> logprobs;  // the tokens of this delta that carry them
};

class Generation {
 public:
  Generation(std::shared_ptr<const TextModel> text, std::vector<std::string> stops, bool reasoning,
             bool start_in_reasoning);
  // Feeds one event; appends text to `d`. Returns true when the request is over (finished, or
  // a stop string matched — the caller then cancels the sequence).
  bool Consume(const SeqEvent& e, Delta* d);
  bool done() const { return done_; }
  bool stop_string_hit() const { return stop_hit_; }
  // "stop", "length", or the engine's reason when it failed ("timeout", "error", "cancelled").
  std::string finish_reason() const;
  FinishReason engine_finish() const { return finish_; }
  const std::string& error() const { return error_; }
  int completion_tokens() const { return n_tokens_; }
  // Timing (steady seconds; 0 when not reached).
  double admit_time = 0, first_token_time = 0, last_token_time = 0, finish_time = 0;
  std::vector<double> token_gaps;  // inter-token latencies
  int preemptions = 0;

 private:
  void Text(const std::string& s, Delta* d);
  std::shared_ptr<const TextModel> text_;
  std::unique_ptr<TokenTextStream> stream_;
  TextFilter filter_;  // stop strings, then the reasoning split
  bool done_ = false, stop_hit_ = false;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  int n_tokens_ = 0;
};

// {"traceEvents":[...]} for one request: queue, prefill chunks, decode steps, preemptions,
// plus the server-side spans given in `extra` (name, t0, t1). Timestamps in µs from t_origin.
nlohmann::json ChromeTrace(
    const SeqRequest& r, const std::string& model,
    const std::vector<std::pair<std::string, std::pair<double, double>>>& extra);

}  // namespace es::server
