// Token sampling over one row of logits: penalties (repeat, presence, frequency), temperature,
// top-k, top-p, min-p, then a draw from a seeded generator. temperature <= 0 is greedy (argmax,
// lowest id on ties). Deterministic for a given seed and history.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "edgeseek/internal/backends/sampling.h"

namespace es {

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;                   // 0: off
  float top_p = 1.0f;              // 1: off
  float min_p = 0.0f;              // 0: off
  float repeat_penalty = 1.0f;     // llama.cpp style, over the whole history
  float presence_penalty = 0.0f;   // OpenAI style
  float frequency_penalty = 0.0f;  // OpenAI style
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Greedy without penalties: the pick is the plain argmax of the logits (lowest index on ties),
  // which a backend can compute on the device (Runner::ForwardArgmax) when nothing is banned.
  // This step's parameters for sampling on the device (Backend::ComputeSample): the history's
  // counts, `banned` at -1, and a seed drawn from this sampler's generator. False (and nothing
  // drawn) when the history holds more distinct ids than the device takes.
  bool DeviceParams(const std::vector<int32_t>& history, const std::vector<int32_t>& banned,
                    RowSampling* out);
  bool plain_greedy() const {
    return p_.temperature <= 0.0f && p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f &&
           p_.frequency_penalty == 0.0f;
  }
  // Picks the next id from logits[vocab]; `history` is the ids so far (prompt + generated);
  // `banned` ids get -inf (e.g. EOS before min_new_tokens).
  int32_t Sample(const float* logits, int vocab, const std::vector<int32_t>& history,
                 const std::vector<int32_t>& banned = {});
  const SamplingParams& params() const { return p_; }
  // The distribution Sample draws from: the surviving candidates (probability, id) after
  // penalties, temperature, top-k, min-p and top-p, in descending probability (lowest id first on
  // ties), probabilities summing to ~1. Greedy (temperature <= 0) or every id banned: one forced
  // id at 1, and false (Sample then takes no draw). Speculative decoding (speculative.h) verifies
  // drafts against exactly this.
  using Candidates = std::vector<std::pair<float, int32_t>>;
  bool Distribution(const float* logits, int vocab, const std::vector<int32_t>& history,
                    const std::vector<int32_t>& banned, Candidates* out) const;
  // A draw from `c` (a Distribution) with this sampler's generator: Sample is Distribution + Draw.
  int32_t Draw(const Candidates& c);
  // A uniform draw in [0, 1) from this sampler's generator (speculative acceptance).
  double Uniform();
  // The row the draw starts from: logits with `banned` at -inf and the penalties over
  // `history` applied (before temperature and truncation). Logprobs are its log-softmax.
  void Processed(const float* logits, int vocab, const std::vector<int32_t>& history,
                 const std::vector<int32_t>& banned, std::vector<float>* out) const;

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  Candidates scratch_;
};

int32_t Argmax(const float* logits, int vocab);

// log-softmax of row[vocab] at `id`, and the `top` most likely ids with theirs (descending,
// lowest id first on ties). -inf entries take no part.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs LogSoftmaxAt(const float* row, int vocab, int32_t id, int top);

// Restricts a sequence's next token (constrained decoding; the server's is a grammar, see
// src/grammar) and is told the id picked. On a backend that samples on the device the engine
// asks for the allowed set before the step (AllowMask) and sends it with the row's sampling
// parameters (RowSampling::allow), so only the id comes back; elsewhere, and for rows that
// want logprobs, it applies the constraint to the step's logits row on the host (Apply) before
// the sampler runs — greedy included (docs/server.md).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of disallowed ids to -inf; returns how many ids stay allowed. 0 means
  // nothing may follow: the output is complete when complete() says so, else stuck.
  // es::Error when the constraint cannot be evaluated (its limits).
  virtual int Apply(float* logits, int vocab) = 0;
  // The same set as Apply's as a bitmask (RowSampling::allow: ceil(vocab / 64) words, bit id % 64
  // of word id / 64 set when id is allowed, no bit at or past vocab); returns how many ids are
  // allowed, with Apply's meaning of 0 and errors. Default: Apply on a row of zeros.
  virtual int AllowMask(int vocab, std::vector<uint64_t>* allow);
  virtual void Accept(int32_t id) = 0;
  virtual bool complete() const = 0;
};

}  // namespace es
