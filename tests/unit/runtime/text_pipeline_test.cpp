// The one text pipeline (runtime/text_pipeline.h): the "<think>" rule, TextFilter over split
// chunks (stop strings, then the reasoning split) and TokenText on the tiny tokenizer's ids.
#include "edgeseek/internal/runtime/text_pipeline.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace es {
namespace {

TEST(TextPipeline, TemplateOpensReasoning) {
  EXPECT_TRUE(TemplateOpensReasoning("<|Assistant|><think>\n"));
  EXPECT_TRUE(TemplateOpensReasoning("<think>"));
  EXPECT_TRUE(TemplateOpensReasoning("x<think> \r\n\t"));
  EXPECT_FALSE(TemplateOpensReasoning("<think>\n</think>\n\n"));  // opened and closed (no thinking)
  EXPECT_FALSE(TemplateOpensReasoning("<think>\nhello"));
  EXPECT_FALSE(TemplateOpensReasoning("think>"));
  EXPECT_FALSE(TemplateOpensReasoning(""));
  EXPECT_FALSE(TemplateOpensReasoning(" \n"));
}

struct Split {
  std::string reasoning, content;
  bool stopped = false;
};

// Feeds `text` in pieces of `step` bytes, then finishes.
Split FeedAll(const std::string& text, size_t step, std::vector<std::string> stops, bool reasoning,
              bool opened) {
  TextFilter f(std::move(stops), reasoning, opened);
  Split s;
  for (size_t i = 0; i < text.size() && !s.stopped; i += step)
    s.stopped = f.Feed(std::string_view(text).substr(i, step), &s.reasoning, &s.content);
  f.Finish(&s.reasoning, &s.content);
  return s;
}

TEST(TextPipeline, FilterIsTheSameOverAnySplit) {
  const std::string text = "<think>\nplan: a, b</think>\n\nThe answer is 42.\nEND trailing";
  for (size_t step : {1, 2, 3, 5, 7, 64}) {
    SCOPED_TRACE(step);
    Split a = FeedAll(text, step, {"END"}, true, false);
    EXPECT_EQ(a.reasoning, "\nplan: a, b");
    EXPECT_EQ(a.content, "The answer is 42.\n");
    EXPECT_TRUE(a.stopped);
    Split b = FeedAll(text, step, {}, false, false);  // no split, no stops: the text unchanged
    EXPECT_EQ(b.reasoning, "");
    EXPECT_EQ(b.content, text);
    EXPECT_FALSE(b.stopped);
    // The template opened <think>: only the closing tag comes.
    Split c = FeedAll("plan</think>answer", step, {}, true, true);
    EXPECT_EQ(c.reasoning, "plan");
    EXPECT_EQ(c.content, "answer");
    // A stop string inside the reasoning ends everything there.
    Split d = FeedAll("abc STOP def</think>x", step, {"STOP"}, true, true);
    EXPECT_EQ(d.reasoning, "abc ");
    EXPECT_EQ(d.content, "");
    // A held-back prefix of a stop string that never completes comes out at the end.
    Split e = FeedAll("ends with EN", step, {"END"}, true, false);
    EXPECT_EQ(e.content, "ends with EN");
    EXPECT_FALSE(e.stopped);
  }
}

TEST(TextPipeline, TokenTextMatchesDecode) {
  auto tok = Tokenizer::Load(test::SourceDir() + "/tests/data/tiny_tokenizer");
  const std::string text = "Hello world, héllo <think>x</think> done";
  const std::vector<int32_t> ids = tok->Encode(text);
  ASSERT_GT(ids.size(), 5u);
  // No split, no stops: exactly Decode's text, whatever the byte boundaries of the ids.
  {
    TokenText t(*tok, {}, false, false);
    std::string r, c;
    for (int32_t id : ids) t.Push(id, &r, &c);
    t.Finish(&r, &c);
    EXPECT_EQ(r, "");
    EXPECT_EQ(c, tok->Decode(ids, true));
  }
  // A stop string ends the stream mid-way; further ids add nothing.
  {
    TokenText t(*tok, {"llo <"}, true, false);
    std::string r, c;
    bool stopped = false;
    for (int32_t id : ids) stopped = t.Push(id, &r, &c) || stopped;
    t.Finish(&r, &c);
    EXPECT_TRUE(stopped);
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(c, "Hello world, hé");
  }
}

TEST(TextPipeline, ChatTextReadsTheTemplateAndEos) {
  auto tok = std::shared_ptr<const Tokenizer>(
      Tokenizer::Load(test::SourceDir() + "/tests/data/tiny_tokenizer"));
  ChatText t(tok, {5}, "tiny");
  ASSERT_TRUE(t.has_template());
  EXPECT_FALSE(t.has_reasoning_tags());
  EXPECT_TRUE(t.IsEos(5));
  EXPECT_TRUE(t.IsEos(tok->eos_id()));  // the tokenizer's EOS joins the model's
  EXPECT_FALSE(t.IsEos(6));
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", "hi"}});
  EXPECT_EQ(t.RenderChat(msgs, nullptr, nullptr),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.RenderChat(msgs, nullptr, nullptr, false), "<|im_start|>user\nhi<|im_end|>\n");
}

}  // namespace
}  // namespace es
