// Stop strings and the R1 reasoning split over streamed text
// (edgeseek/internal/runtime/text_stream.h).
#include "edgeseek/internal/runtime/text_stream.h"

#include <algorithm>

namespace es {

size_t PartialSuffix(std::string_view text, std::string_view marker) {
  size_t best = 0;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) {
      best = n;
      break;
    }
  }
  return best;
}

// ---- StopMatcher ------------------------------------------------------------------------------
StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

bool StopMatcher::Feed(std::string_view text, std::string* out) {
  if (stopped_) return true;
  held_.append(text);
  if (stops_.empty()) {
    out->append(held_);
    held_.clear();
    return false;
  }
  size_t first = std::string::npos;
  for (auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    out->append(held_, 0, first);
    held_.clear();
    stopped_ = true;
    return true;
  }
  size_t keep = 0;
  for (auto& s : stops_) keep = std::max(keep, PartialSuffix(held_, s));
  out->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopMatcher::Flush(std::string* out) {
  if (!stopped_) out->append(held_);
  held_.clear();
}

// ---- ReasoningSplitter ------------------------------------------------------------------------
ReasoningSplitter::ReasoningSplitter(bool enabled, bool start_in_reasoning, std::string open,
                                     std::string close)
    : state_(!enabled             ? State::kContent
             : start_in_reasoning ? State::kReasoning
                                  : State::kStart),
      open_(std::move(open)),
      close_(std::move(close)) {}

namespace {
bool AllSpace(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; });
}
size_t SkipSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  return i;
}
}  // namespace

void ReasoningSplitter::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  held_.append(text);
  for (;;) {
    switch (state_) {
      case State::kContent:
        content->append(held_);
        held_.clear();
        return;
      case State::kStart: {
        // Only whitespace may come before the opening tag; anything else is plain content.
        size_t ws = SkipSpace(held_);
        std::string_view rest = std::string_view(held_).substr(ws);
        if (rest.size() >= open_.size() && rest.substr(0, open_.size()) == open_) {
          held_.erase(0, ws + open_.size());
          state_ = State::kReasoning;
          continue;
        }
        if (rest.size() < open_.size() && std::string_view(open_).substr(0, rest.size()) == rest)
          return;  // could still become the tag
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        size_t at = held_.find(close_);
        if (at != std::string::npos) {
          reasoning->append(held_, 0, at);
          held_.erase(0, at + close_.size());
          state_ = State::kAfterClose;
          continue;
        }
        size_t keep = PartialSuffix(held_, close_);
        reasoning->append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case State::kAfterClose: {
        // The answer follows the tag after a blank line or two; drop that whitespace.
        if (AllSpace(held_)) {
          held_.clear();
          return;
        }
        held_.erase(0, SkipSpace(held_));
        state_ = State::kContent;
        continue;
      }
    }
  }
}

void ReasoningSplitter::Flush(std::string* reasoning, std::string* content) {
  if (state_ == State::kReasoning) {
    reasoning->append(held_);
  } else if (state_ != State::kAfterClose) {
    content->append(held_);
  }
  held_.clear();
}

}  // namespace es
