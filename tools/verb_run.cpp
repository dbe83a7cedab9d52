// `edgeseek run -m MODEL -p "text"` and `edgeseek chat -m MODEL`: the chat template applied to
// the conversation, generation streamed as text at UTF-8 boundaries, R1-style reasoning between
// <think> and </think> shown dimmed on a terminal (or hidden with --hide-reasoning), stops at
// EOS, stop strings or -n. In chat, /reset clears the conversation, /quit leaves, Ctrl-C stops
// the current answer (not the program).
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/text_pipeline.h"
#include "verb.h"

namespace es::tools {
namespace {

std::atomic<bool> g_interrupt{false};
void OnSigint(int) { g_interrupt = true; }

struct ChatArgs {
  ModelArgs model;
  SamplingParams sp;
  std::string prompt, system;
  std::vector<std::string> stops;
  int n = 512;
  bool hide_reasoning = false;
  bool raw = false;  // no chat template
};

void AddChatArgs(CLI::App& app, ChatArgs& a, bool with_prompt) {
  a.model.Add(app);
  if (with_prompt) app.add_option("-p,--prompt", a.prompt, "user message")->required();
  app.add_option("--system", a.system, "system prompt");
  app.add_option("-n,--n-predict", a.n, "maximum new tokens");
  app.add_option("--temp", a.sp.temperature, "temperature (0: greedy)");
  app.add_option("--top-k", a.sp.top_k, "top-k (0: off)");
  app.add_option("--top-p", a.sp.top_p, "top-p");
  app.add_option("--min-p", a.sp.min_p, "min-p");
  app.add_option("--repeat-penalty", a.sp.repeat_penalty, "repeat penalty");
  app.add_option("--stop", a.stops, "stop string (repeatable)");
  app.add_flag("--hide-reasoning", a.hide_reasoning, "hide text between <think> and </think>");
  app.add_flag("--raw", a.raw, "send the prompt as is, without the chat template");
}

class Session {
 public:
  explicit Session(const ChatArgs& a) : a_(a) {
    model_ = a.model.Load();
    if (!model_->tokenizer() && !model_->tokenizer_error().empty()) Fail(model_->tokenizer_error());
    ES_CHECK(model_->tokenizer(),
             "model has no tokenizer (tokenizer.json) — run and chat need one");
    text_ =
        std::make_unique<ChatText>(std::shared_ptr<const Tokenizer>(model_, model_->tokenizer()),
                                   model_->generation().eos_ids, a.model.model);
    runner_ = a.model.MakeRunner(model_);
    tty_ = isatty(STDOUT_FILENO);
    Reset();
  }
  void Reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!a_.system.empty()) messages_.push_back({{"role", "system"}, {"content", a_.system}});
  }

  // Appends the user turn, generates and streams the answer; returns the answer text.
  std::string Turn(const std::string& user) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    std::string prompt;
    bool add_special = false;
    if (text_->has_template() && !a_.raw) {
      prompt = text_->RenderChat(messages_, nullptr, nullptr);
    } else {
      prompt = user;
      add_special = true;
    }
    std::vector<int32_t> ids = text_->Encode(prompt, add_special);
    ES_CHECK(int64_t(ids.size()) + 1 < runner_->context(), "prompt of ", ids.size(),
             " tokens does not fit the context of ", runner_->context(), " (raise -c)");
    const bool opened = TemplateOpensReasoning(prompt);
    TokenText pipe(text_->tokenizer(), a_.stops, /*reasoning=*/true, opened);
    std::string answer;
    bool in_reasoning = opened;
    auto emit = [&](const std::string& reasoning, const std::string& content) {
      if (!reasoning.empty() && !a_.hide_reasoning) {
        if (!in_reasoning && tty_) std::fputs("\x1b[2m", stdout);
        in_reasoning = true;
        std::fputs(reasoning.c_str(), stdout);
      }
      if (!content.empty()) {
        if (in_reasoning && tty_) std::fputs("\x1b[0m", stdout);
        if (in_reasoning && !a_.hide_reasoning) std::fputs("\n", stdout);
        in_reasoning = false;
        std::fputs(content.c_str(), stdout);
      }
      answer += content;
      std::fflush(stdout);
    };
    GenerateOptions go;
    go.max_new_tokens = std::min<int64_t>(a_.n, runner_->context() - int64_t(ids.size()) - 1);
    go.eos_ids = text_->eos_ids();
    go.sampling = a_.sp;
    go.sampling.seed = a_.model.seed;
    g_interrupt = false;
    go.on_token = [&](int32_t id) {
      if (text_->IsEos(id)) return true;
      std::string reasoning, content;
      const bool stopped = pipe.Push(id, &reasoning, &content);
      emit(reasoning, content);
      return !stopped && !g_interrupt;
    };
    const int slot = runner_->AcquireSlot();
    try {
      Generate(*runner_, slot, ids, go);
    } catch (...) {
      runner_->ReleaseSlot(slot);
      throw;
    }
    runner_->ReleaseSlot(slot);
    std::string reasoning, content;
    pipe.Finish(&reasoning, &content);
    emit(reasoning, content);
    if (tty_ && in_reasoning) std::fputs("\x1b[0m", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages_.push_back({{"role", "assistant"}, {"content", answer}});
    return answer;
  }

 private:
  const ChatArgs& a_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<ChatText> text_;
  std::unique_ptr<Runner> runner_;
  nlohmann::ordered_json messages_;
  bool tty_ = false;
};

VerbRun SetupRun(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  a->sp.temperature = 0.6f;
  a->sp.top_p = 0.95f;
  AddChatArgs(app, *a, true);
  return [=]() {
    std::signal(SIGINT, OnSigint);
    Session s(*a);
    s.Turn(a->prompt);
    return 0;
  };
}

VerbRun SetupChat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  a->sp.temperature = 0.6f;
  a->sp.top_p = 0.95f;
  AddChatArgs(app, *a, false);
  return [=]() {
    struct sigaction sa {};
    sa.sa_handler = OnSigint;  // no SA_RESTART: a blocked read returns, the loop re-prompts
    sigaction(SIGINT, &sa, nullptr);
    Session s(*a);
    const bool tty = isatty(STDIN_FILENO);
    std::string line;
    for (;;) {
      g_interrupt = false;
      if (tty) {
        // Line editing and history through libedit.
        char* l = readline("> ");
        if (!l) {
          if (g_interrupt) {  // Ctrl-C at the prompt: a fresh prompt, not an exit
            std::fputs("\n", stdout);
            continue;
          }
          break;
        }
        line = l;
        std::free(l);
        if (!line.empty()) add_history(line.c_str());
      } else if (!std::getline(std::cin, line)) {
        break;
      }
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        s.Reset();
        std::fputs("(conversation cleared)\n", stdout);
        continue;
      }
      if (line.empty()) continue;
      s.Turn(line);
    }
    return 0;
  };
}

VerbRegistrar reg_run("run", "apply the chat template to a prompt, generate and stream text",
                      SetupRun);
VerbRegistrar reg_chat("chat", "multi-turn chat (/reset, /quit; Ctrl-C stops an answer)",
                       SetupChat);

}  // namespace
}  // namespace es::tools
