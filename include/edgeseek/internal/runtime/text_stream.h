// Streaming text filters between the detokenizer and the user (the server's responses, `run` and
// `chat` in the CLI), each holding back only the tail that could still become a marker:
//   StopMatcher        — stop strings: emits text up to the first stop string, then ends;
//   ReasoningSplitter  — DeepSeek-R1 reasoning: text between <think> and </think> goes to
//                        reasoning_content, the rest to content; also when the chat template
//                        already opened <think> (start_in_reasoning), so that the model emits
//                        only the closing tag.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace es {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends to `out` the text that can no longer be part of a stop string. Returns true once a
  // stop string has matched; the text before it has been emitted and the rest is dropped.
  bool Feed(std::string_view text, std::string* out);
  // End of stream: emits what was held back (no stop matched).
  void Flush(std::string* out);
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

class ReasoningSplitter {
 public:
  ReasoningSplitter(bool enabled, bool start_in_reasoning, std::string open = "<think>",
                    std::string close = "</think>");
  void Feed(std::string_view text, std::string* reasoning, std::string* content);
  void Flush(std::string* reasoning, std::string* content);

 private:
  enum class State { kStart, kReasoning, kAfterClose, kContent };
  State state_;
  std::string open_, close_, held_;
};

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialSuffix(std::string_view text, std::string_view marker);

}  // namespace es
