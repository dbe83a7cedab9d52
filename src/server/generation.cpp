// Event channel, text pipeline and trace export of one request (generation.h).
#include "generation.h"

#include <algorithm>
#include <chrono>

namespace es::server {

void EventChannel::Push(const SeqEvent& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
  }
  cv_.notify_all();
}

void EventChannel::Drain(std::vector<SeqEvent>* out, double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (events_.empty())
    cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !events_.empty(); });
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
}

Generation::Generation(std::shared_ptr<const TextModel> text, std::vector<std::string> stops,
                       bool reasoning, bool start_in_reasoning)
    : text_(std::move(text)),
      stream_(text_->NewStream()),
      filter_(std::move(stops), reasoning, start_in_reasoning) {}

void Generation::Text(const std::string& s, Delta* d) {
  if (filter_.Feed(s, &d->reasoning, &d->content)) stop_hit_ = true;
}

bool Generation::Consume(const SeqEvent& e, Delta* d) {
  if (done_) return true;
  switch (e.kind) {
    case SeqEventKind::kAdmitted:
      if (admit_time == 0) admit_time = e.time;
      return false;
    case SeqEventKind::kPreempted:
      ++preemptions;
      return false;
    case SeqEventKind::kToken: {
      ++n_tokens_;
      if (first_token_time == 0)
        first_token_time = e.time;
      else
        token_gaps.push_back(e.time - last_token_time);
      last_token_time = e.time;
      if (e.logprobs) d->logprobs.push_back({e.token, e.logprobs});
      Text(stream_->Push(e.token), d);
      if (stop_hit_) {
        filter_.Finish(&d->reasoning, &d->content);
        finish_ = FinishReason::kStop;
        finish_time = e.time;
        done_ = true;
      }
      return done_;
    }
    case SeqEventKind::kFinished: {
      finish_ = e.finish;
      error_ = e.message;
      finish_time = e.time;
      if (e.finish == FinishReason::kStop || e.finish == FinishReason::kLength) {
        Text(stream_->Flush(), d);
        filter_.Finish(&d->reasoning, &d->content);
        if (stop_hit_) finish_ = FinishReason::kStop;
      }
      done_ = true;
      return true;
    }
  }
  return false;
}

std::string Generation::finish_reason() const {
  if (stop_hit_) return "stop";
  switch (finish_) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return FinishReasonName(finish_);
  }
}

nlohmann::json ChromeTrace(
    const SeqRequest& r, const std::string& model,
    const std::vector<std::pair<std::string, std::pair<double, double>>>& extra) {
  using json = nlohmann::json;
  double origin = r.submit_time;
  for (auto& [name, t] : extra) origin = std::min(origin, t.first);
  auto us = [&](double t) { return (t - origin) * 1e6; };
  json events = json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"args", {{"name", "edgeseek request " + r.id + " (" + model + ")"}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "http"}}}});
  for (auto& [name, t] : extra)
    events.push_back({{"name", name},
                      {"cat", "http"},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", 0},
                      {"ts", us(t.first)},
                      {"dur", std::max(0.0, (t.second - t.first) * 1e6)}});
  for (auto& e : r.trace) {
    json args = {{"instance", e.instance}};
    if (e.tokens) args["tokens"] = e.tokens;
    if (e.batch_tokens) args["batch_tokens"] = e.batch_tokens, args["batch_seqs"] = e.batch_seqs;
    const StepSplit& sp = e.split;
    if (sp.valid) {
      args["upload_ms"] = sp.upload_s * 1e3;
      args["dispatch_ms"] = sp.dispatch_s * 1e3;
      args["shader_ms"] = sp.shader_s * 1e3;
      args["download_ms"] = sp.download_s * 1e3;
      args["backend_ms"] = sp.total_s * 1e3;
    }
    int tid = 1 + std::max(0, e.instance);
    events.push_back({{"name", e.name},
                      {"cat", "engine"},
                      {"ph", e.t1 > e.t0 ? "X" : "i"},
                      {"pid", 1},
                      {"tid", tid},
                      {"ts", us(e.t0)},
                      {"dur", std::max(0.0, (e.t1 - e.t0) * 1e6)},
                      {"args", args}});
    if (sp.valid) {
      // The backend's phases as slices nested in the step, in the order a GPU pass runs them
      // (the backend measures each as a sum over the pass; they are laid end to end here).
      double t = e.t0;
      for (auto [name, d] : {std::pair<const char*, double>{"upload", sp.upload_s},
                             {"dispatch", sp.dispatch_s},
                             {"shader", sp.shader_s},
                             {"download", sp.download_s}}) {
        if (d <= 0) continue;
        events.push_back({{"name", name},
                          {"cat", "backend"},
                          {"ph", "X"},
                          {"pid", 1},
                          {"tid", tid},
                          {"ts", us(t)},
                          {"dur", d * 1e6}});
        t += d;
      }
    }
  }
  return json{{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"request", r.id},
                {"model", model},
                {"prompt_tokens", r.prompt.size()},
                {"completion_tokens", r.n_generated},
                {"preemptions", r.preemptions},
                {"migrations", r.migrations}}}};
}

}  // namespace es::server
