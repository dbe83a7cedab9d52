// The C API (include/edgeseek/edgeseek.h) through libedgeseek.so: errors as values with their
// messages, the buffer-size protocol, templates, greedy generation equal to es::Generate, stop
// strings, callbacks that stop, the reasoning split, logits, and the batching engine (its
// requests give what es_generate gives, alone or together).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "edgeseek/edgeseek.h"
#include "test_util.h"

namespace {

std::string ModelDir() { return es::test::SourceDir() + "/tests/golden/data/models/qwen2_realdim"; }
std::string TokDir() { return es::test::SourceDir() + "/tests/data/tiny_tokenizer"; }

struct ModelFree {
  void operator()(es_model* m) const { es_model_free(m); }
};
using ModelPtr = std::unique_ptr<es_model, ModelFree>;

ModelPtr Load(const std::string& tokenizer = TokDir()) {
  es_model_params p = es_model_default_params();
  const std::string path = ModelDir();
  p.path = path.c_str();
  p.tokenizer = tokenizer.c_str();
  p.context = 256;
  es_model* m = nullptr;
  EXPECT_EQ(es_model_load(&p, &m), ES_OK) << es_last_error();
  return ModelPtr(m);
}

struct Stream {
  std::vector<int32_t> ids;
  std::string content, reasoning;
  int stop_after = -1;  // on_token returns false at this many ids
};

bool OnToken(void* user, int32_t id) {
  auto* s = static_cast<Stream*>(user);
  s->ids.push_back(id);
  return s->stop_after < 0 || int(s->ids.size()) < s->stop_after;
}

bool OnText(void* user, es_text_kind kind, const char* text, size_t len) {
  auto* s = static_cast<Stream*>(user);
  (kind == ES_TEXT_REASONING ? s->reasoning : s->content).append(text, len);
  return true;
}

es_generate_params Params(Stream* s, int max_tokens) {
  es_generate_params gp = es_generate_default_params();
  gp.max_tokens = max_tokens;
  gp.on_token = OnToken;
  gp.on_text = OnText;
  gp.user = s;
  return gp;
}

std::string Render(es_model* m, const std::string& user) {
  es_chat_message msg = {"user", user.c_str()};
  size_t n = 0;
  EXPECT_EQ(es_chat_apply_template(m, &msg, 1, true, nullptr, 0, &n), ES_ERR_BUFFER_TOO_SMALL);
  std::string s(n, '\0');
  EXPECT_EQ(es_chat_apply_template(m, &msg, 1, true, s.data(), n, &n), ES_OK) << es_last_error();
  return s;
}

TEST(CApi, ErrorsAreValuesWithMessages) {
  es_model* m = reinterpret_cast<es_model*>(1);
  EXPECT_EQ(es_model_load(nullptr, &m), ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("NULL"), std::string::npos) << es_last_error();
  es_model_params p = es_model_default_params();
  EXPECT_EQ(es_model_load(&p, &m), ES_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(es_last_error()).find("path"), std::string::npos) << es_last_error();
  p.path = "/nonexistent/model-dir";
  EXPECT_EQ(es_model_load(&p, &m), ES_ERR_LOAD);
  EXPECT_NE(std::string(es_last_error()).find("/nonexistent/model-dir"), std::string::npos)
      << es_last_error();
  const std::string path = ModelDir();
  p.path = path.c_str();
  p.kv_type = "q3_x";
  EXPECT_EQ(es_model_load(&p, &m), ES_ERR_LOAD);
  EXPECT_NE(std::string(es_last_error()).find("q3_x"), std::string::npos) << es_last_error();
  p.kv_type = nullptr;
  // The golden model has no tokenizer of its own: the C API needs one.
  EXPECT_EQ(es_model_load(&p, &m), ES_ERR_LOAD);
  EXPECT_NE(std::string(es_last_error()).find("tokenizer"), std::string::npos) << es_last_error();
  const std::string tok = TokDir();
  p.tokenizer = tok.c_str();
  p.backend = "nosuchbackend";
  EXPECT_EQ(es_model_load(&p, &m), ES_ERR_LOAD);
  EXPECT_NE(std::string(es_last_error()).find("nosuchbackend"), std::string::npos)
      << es_last_error();
  EXPECT_EQ(m, nullptr);
  // Messages are per thread.
  std::string other = "unset";
  std::thread([&] { other = es_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(es_status_name(ES_ERR_BUFFER_TOO_SMALL), "buffer too small");
  EXPECT_STREQ(es_version(), "0.1.0");
  es_model_free(nullptr);  // a no-op
}

TEST(CApi, TokenizeDetokenize) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  EXPECT_EQ(es_model_vocab_size(m.get()), 512);
  EXPECT_EQ(es_model_context(m.get()), 256);
  const std::string text = "Hello world, héllo!";
  size_t n = 0;
  ASSERT_EQ(es_tokenize(m.get(), text.data(), text.size(), false, nullptr, 0, &n),
            ES_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 3u);
  std::vector<int32_t> ids(n);
  size_t short_n = 0;
  EXPECT_EQ(es_tokenize(m.get(), text.data(), text.size(), false, ids.data(), n - 1, &short_n),
            ES_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(short_n, n);
  ASSERT_EQ(es_tokenize(m.get(), text.data(), text.size(), false, ids.data(), n, &n), ES_OK);
  std::string back(64, 'x');
  size_t len = 0;
  ASSERT_EQ(es_detokenize(m.get(), ids.data(), n, true, back.data(), back.size(), &len), ES_OK);
  EXPECT_EQ(back.substr(0, len), text);
  EXPECT_EQ(back[len], '\0');
  EXPECT_EQ(es_detokenize(m.get(), ids.data(), n, true, back.data(), len, &len),
            ES_OK);  // no room for NUL
  EXPECT_EQ(es_detokenize(m.get(), ids.data(), n, true, back.data(), len - 1, &len),
            ES_ERR_BUFFER_TOO_SMALL);
  const int32_t bad[] = {1, 99999};
  EXPECT_EQ(es_detokenize(m.get(), bad, 2, true, back.data(), back.size(), &len),
            ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("99999"), std::string::npos) << es_last_error();
  EXPECT_EQ(es_tokenize(nullptr, "a", 1, false, ids.data(), n, &n), ES_ERR_INVALID_ARGUMENT);
}

TEST(CApi, ChatTemplate) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  EXPECT_EQ(Render(m.get(), "hi"), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  es_chat_message bad = {"user", nullptr};
  char buf[64];
  size_t n;
  EXPECT_EQ(es_chat_apply_template(m.get(), &bad, 1, true, buf, sizeof buf, &n),
            ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("message 0"), std::string::npos) << es_last_error();
}

TEST(CApi, GreedyEqualsTheCli) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  const std::string prompt = Render(m.get(), "Hello there");
  Stream s;
  es_generate_params gp = Params(&s, 20);
  es_generate_result res;
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, &res), ES_OK) << es_last_error();
  ASSERT_EQ(res.completion_tokens, int(s.ids.size()));
  ASSERT_GT(s.ids.size(), 0u);
  // The same prompt ids through `edgeseek generate` (EOS masked there: compare before an EOS).
  size_t n = 0;
  es_tokenize(m.get(), prompt.data(), prompt.size(), false, nullptr, 0, &n);
  std::vector<int32_t> pids(n);
  ASSERT_EQ(es_tokenize(m.get(), prompt.data(), prompt.size(), false, pids.data(), n, &n), ES_OK);
  EXPECT_EQ(res.prompt_tokens, int(n));
  size_t k = s.ids.size() - (res.finish == ES_FINISH_STOP ? 1 : 0);
  std::string ids_arg;
  for (int32_t id : pids) ids_arg += (ids_arg.empty() ? "" : ",") + std::to_string(id);
  std::string out;
  ASSERT_EQ(es::test::RunCommand(es::test::CliPath() + " generate -m " + ModelDir() + " --ids " +
                                     ids_arg + " -n " + std::to_string(k) + " --temp 0",
                                 &out),
            0);
  std::string want;
  for (size_t i = 0; i < k; ++i) want += (i ? " " : "") + std::to_string(s.ids[i]);
  EXPECT_EQ(out, want + "\n");
  // The streamed text is the ids' text (the golden model's vocabulary is larger than the tiny
  // tokenizer's: the ids it does not know have no text).
  std::vector<int32_t> known;
  for (size_t i = 0; i < k; ++i)
    if (s.ids[i] <= 378) known.push_back(s.ids[i]);
  std::string text(4096, '\0');
  size_t len = 0;
  ASSERT_EQ(
      es_detokenize(m.get(), known.data(), known.size(), true, text.data(), text.size(), &len),
      ES_OK)
      << es_last_error();
  EXPECT_EQ(s.content, text.substr(0, len));
  EXPECT_EQ(s.reasoning, "");
}

TEST(CApi, StopStringsAndCallbacksStop) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  const std::string prompt = "The quick brown fox";
  Stream full;
  es_generate_params gp = Params(&full, 24);
  gp.add_special = true;
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, nullptr), ES_OK) << es_last_error();
  ASSERT_GE(full.content.size(), 6u);
  // A stop string from the middle of the answer: the text ends right before it.
  const std::string stop = full.content.substr(full.content.size() / 2, 2);
  const size_t at = full.content.find(stop);
  Stream cut;
  gp = Params(&cut, 24);
  gp.add_special = true;
  const char* stops[] = {stop.c_str()};
  gp.stops = stops;
  gp.n_stops = 1;
  es_generate_result res;
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, &res), ES_OK) << es_last_error();
  EXPECT_EQ(cut.content, full.content.substr(0, at));
  EXPECT_EQ(res.finish, ES_FINISH_STOP);
  EXPECT_LT(cut.ids.size(), full.ids.size());
  // on_token returning false stops after that token.
  Stream few;
  few.stop_after = 3;
  gp = Params(&few, 24);
  gp.add_special = true;
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, &res), ES_OK);
  EXPECT_EQ(few.ids.size(), 3u);
  EXPECT_EQ(res.finish, ES_FINISH_CANCELLED);
  EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + 3), few.ids);
  // Bad parameters name the field.
  gp.max_tokens = 0;
  EXPECT_EQ(es_generate(m.get(), prompt.c_str(), &gp, &res), ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("max_tokens"), std::string::npos);
  gp.max_tokens = 4;
  gp.sampler.top_p = 0;
  EXPECT_EQ(es_generate(m.get(), prompt.c_str(), &gp, &res), ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("top_p"), std::string::npos);
}

TEST(CApi, ReasoningComesApart) {
  // The tiny tokenizer with an R1-style template that opens <think> in the generation prompt.
  namespace fs = std::filesystem;
  const std::string dir = es::test::TempDir() + "/r1_tokenizer";
  fs::create_directories(dir);
  fs::copy_file(TokDir() + "/tokenizer.json", dir + "/tokenizer.json");
  nlohmann::json cfg =
      nlohmann::json::parse(es::test::ReadFile(TokDir() + "/tokenizer_config.json"));
  cfg["chat_template"] =
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor "
      "%}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}{# </think> #}";
  es::test::WriteFile(dir + "/tokenizer_config.json", cfg.dump());
  ModelPtr m = Load(dir);
  ASSERT_TRUE(m);
  EXPECT_TRUE(es_model_has_reasoning(m.get()));
  const std::string prompt = Render(m.get(), "Hello there");
  ASSERT_EQ(prompt.substr(prompt.size() - 8), "<think>\n");
  Stream r;
  es_generate_params gp = Params(&r, 12);
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, nullptr), ES_OK) << es_last_error();
  EXPECT_EQ(r.content, "");  // the random model never closes the block
  EXPECT_FALSE(r.reasoning.empty());
  Stream plain;
  gp = Params(&plain, 12);
  gp.reasoning = false;
  ASSERT_EQ(es_generate(m.get(), prompt.c_str(), &gp, nullptr), ES_OK);
  EXPECT_EQ(plain.reasoning, "");
  EXPECT_EQ(plain.content, r.reasoning);
  EXPECT_EQ(plain.ids, r.ids);
}

TEST(CApi, Logits) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  const int32_t ids[] = {3, 17, 255, 100, 9};
  const size_t vocab = size_t(es_model_vocab_size(m.get()));
  size_t n = 0;
  ASSERT_EQ(es_logits(m.get(), ids, 5, true, nullptr, 0, &n), ES_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(n, 5 * vocab);
  std::vector<float> all(n), last(vocab);
  ASSERT_EQ(es_logits(m.get(), ids, 5, true, all.data(), all.size(), &n), ES_OK) << es_last_error();
  ASSERT_EQ(es_logits(m.get(), ids, 5, false, last.data(), last.size(), &n), ES_OK);
  ASSERT_EQ(n, vocab);
  EXPECT_EQ(std::vector<float>(all.end() - long(vocab), all.end()), last);
  // The last row's argmax is the first greedy token after the same ids.
  const size_t best = size_t(std::max_element(last.begin(), last.end()) - last.begin());
  std::string ids_arg = "3,17,255,100,9", out;
  ASSERT_EQ(
      es::test::RunCommand(
          es::test::CliPath() + " generate -m " + ModelDir() + " --ids " + ids_arg + " -n 1", &out),
      0);
  EXPECT_EQ(out, std::to_string(best) + "\n");
  const int32_t bad[] = {3, 512};
  EXPECT_EQ(es_logits(m.get(), bad, 2, false, last.data(), last.size(), &n),
            ES_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(es_last_error()).find("512"), std::string::npos);
}

TEST(CApi, EngineRequestsMatchGenerate) {
  ModelPtr m = Load();
  ASSERT_TRUE(m);
  const std::vector<std::string> prompts = {"Hello there", "The quick brown fox jumps", "a",
                                            "Tell me a story"};
  std::vector<Stream> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    es_generate_params gp = Params(&alone[i], 10 + int(i));
    gp.add_special = true;
    ASSERT_EQ(es_generate(m.get(), prompts[i].c_str(), &gp, nullptr), ES_OK);
  }
  es_engine_params ep = es_engine_default_params();
  ep.slots = 3;  // four requests: one waits for a slot
  es_engine* e = nullptr;
  ASSERT_EQ(es_engine_create(m.get(), &ep, &e), ES_OK) << es_last_error();
  std::vector<Stream> batched(prompts.size());
  std::vector<es_request*> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    es_generate_params gp = Params(&batched[i], 10 + int(i));
    gp.add_special = true;
    ASSERT_EQ(es_engine_submit(e, prompts[i].c_str(), &gp, &reqs[i]), ES_OK) << es_last_error();
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    es_generate_result res;
    ASSERT_EQ(es_request_wait(reqs[i], &res), ES_OK);
    EXPECT_EQ(batched[i].ids, alone[i].ids) << i;
    EXPECT_EQ(batched[i].content, alone[i].content) << i;
    EXPECT_EQ(res.completion_tokens, int(alone[i].ids.size()));
    EXPECT_TRUE(res.finish == ES_FINISH_LENGTH || res.finish == ES_FINISH_STOP);
    es_request_free(reqs[i]);
  }
  // A stop string and a callback that stops, in the engine.
  Stream cut, few;
  few.stop_after = 2;
  const std::string stop = alone[1].content.substr(alone[1].content.size() / 2, 2);
  const char* stops[] = {stop.c_str()};
  es_generate_params gp = Params(&cut, 11);
  gp.add_special = true;
  gp.stops = stops;
  gp.n_stops = 1;
  es_request *r1, *r2;
  ASSERT_EQ(es_engine_submit(e, prompts[1].c_str(), &gp, &r1), ES_OK);
  gp = Params(&few, 11);
  gp.add_special = true;
  ASSERT_EQ(es_engine_submit(e, prompts[1].c_str(), &gp, &r2), ES_OK);
  es_generate_result res1, res2;
  ASSERT_EQ(es_request_wait(r1, &res1), ES_OK);
  ASSERT_EQ(es_request_wait(r2, &res2), ES_OK);
  EXPECT_EQ(cut.content, alone[1].content.substr(0, alone[1].content.find(stop)));
  EXPECT_EQ(res1.finish, ES_FINISH_STOP);
  EXPECT_EQ(few.ids.size(), 2u);
  EXPECT_EQ(res2.finish, ES_FINISH_CANCELLED);
  es_request_free(r1);
  es_request_free(r2);
  // A prompt longer than a request may hold is refused at submit.
  std::string huge;
  for (int i = 0; i < 300; ++i) huge += "word ";
  es_request* r3 = nullptr;
  EXPECT_EQ(es_engine_submit(e, huge.c_str(), &gp, &r3), ES_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r3, nullptr);
  EXPECT_NE(std::string(es_last_error()).find("tokens"), std::string::npos) << es_last_error();
  // Freeing the engine finishes what is still queued or running.
  Stream a, b;
  es_request *ra, *rb;
  gp = Params(&a, 200);
  ASSERT_EQ(es_engine_submit(e, "x", &gp, &ra), ES_OK);
  gp = Params(&b, 200);
  ASSERT_EQ(es_engine_submit(e, "y", &gp, &rb), ES_OK);
  es_engine_free(e);
  es_generate_result ra_res;
  ASSERT_EQ(es_request_wait(ra, &ra_res), ES_OK);
  EXPECT_NE(ra_res.finish, ES_FINISH_NONE);
  es_request_free(ra);
  es_request_free(rb);
}

}  // namespace
