// `edgeseek run -m MODEL -p "text"` and `edgeseek chat -m MODEL`: the chat template applied to
// the conversation, generation streamed as text at UTF-8 boundaries, R1-style reasoning between
// <think> and </think> shown dimmed on a terminal (or hidden with --hide-reasoning), stops at
// EOS, stop strings or -n. In chat, /reset clears the conversation, /quit leaves, Ctrl-C stops
// the current answer (not the program).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/text_stream.h"
#include "edgeseek/internal/tokenizer/chat_template.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "verb.h"

#include <editline/readline.h>

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
    tok_ = model_->tokenizer();
    if (!tok_ && !model_->tokenizer_error().empty()) Fail(model_->tokenizer_error());
    ES_CHECK(tok_, "model has no tokenizer (tokenizer.json) — run and chat need one");
    runner_ = a.model.MakeRunner(model_);
    if (!tok_->chat_template().empty()) tmpl_ = std::make_unique<ChatTemplate>(tok_->chat_template());
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
    if (tmpl_ && !a_.raw) {
      ChatTemplateInputs in;
      in.messages = messages_;
      in.add_generation_prompt = true;
      in.bos_token = tok_->bos_token();
      in.eos_token = tok_->eos_token();
      prompt = tmpl_->Render(in);
    } else {
      prompt = user;
      add_special = true;
    }
    std::vector<int32_t> ids = tok_->Encode(prompt, add_special);
    ES_CHECK(int64_t(ids.size()) + 1 < runner_->context(), "prompt of ", ids.size(),
             " tokens does not fit the context of ", runner_->context(), " (raise -c)");
    // The template may already have opened <think> (R1): then the answer starts in reasoning.
    const bool opened = prompt.size() >= 8 && prompt.rfind("<think>") != std::string::npos &&
                        prompt.find("</think>", prompt.rfind("<think>")) == std::string::npos &&
                        prompt.rfind("<think>") + 10 >= prompt.size();
    ReasoningSplitter split(true, opened);
    StopMatcher stop(a_.stops);
    StreamDecoder dec(*tok_, /*skip_special=*/true);
    std::string answer;
    bool in_reasoning = opened;
    auto emit = [&](const std::string& text) {
      std::string reasoning, content;
      split.Feed(text, &reasoning, &content);
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
    go.eos_ids = model_->generation().eos_ids;
    if (tok_->eos_id() >= 0 &&
        std::find(go.eos_ids.begin(), go.eos_ids.end(), tok_->eos_id()) == go.eos_ids.end())
      go.eos_ids.push_back(tok_->eos_id());
    go.sampling = a_.sp;
    go.sampling.seed = a_.model.seed;
    g_interrupt = false;
    bool stopped = false;
    go.on_token = [&](int32_t id) {
      if (std::find(go.eos_ids.begin(), go.eos_ids.end(), id) != go.eos_ids.end()) return true;
      std::string text;
      stopped = stop.Feed(dec.Push(id), &text);
      if (!text.empty()) emit(text);
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
    if (!stopped) {
      std::string text;
      stop.Flush(&text);
      text = dec.Flush() + text;
      if (!text.empty()) emit(text);
    }
    std::string reasoning, content;
    split.Flush(&reasoning, &content);
    if (!content.empty()) emit(content);
    if (tty_ && in_reasoning) std::fputs("\x1b[0m", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages_.push_back({{"role", "assistant"}, {"content", answer}});
    return answer;
  }

 private:
  const ChatArgs& a_;
  std::shared_ptr<Model> model_;
  const Tokenizer* tok_ = nullptr;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<ChatTemplate> tmpl_;
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

VerbRegistrar reg_run("run", "apply the chat template to a prompt, generate and stream text", SetupRun);
VerbRegistrar reg_chat("chat", "multi-turn chat (/reset, /quit; Ctrl-C stops an answer)", SetupChat);

}  // namespace
}  // namespace es::tools
