// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing (single sequence),
// ByteLevel (offsets only: no id change), Bert/Roberta ([CLS] A [SEP]), Sequence. They only add
// ids when special tokens are requested.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace es::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single sequence around `ids`.
  virtual void Process(std::vector<int32_t>* ids) const = 0;
};

// null json -> nullptr. `token_id` resolves a token string (for Bert/Roberta's pairs it is not
// needed: they carry ids). Unknown "type" -> es::Error naming it.
std::unique_ptr<PostProcessor> MakePostProcessor(const nlohmann::json& j, const std::string& where);
// A template "prefix $A suffix" with fixed ids (GGUF add_bos/add_eos; tests).
std::unique_ptr<PostProcessor> MakeTemplate(std::vector<int32_t> prefix,
                                            std::vector<int32_t> suffix);

}  // namespace es::tok
