// Whitespace control and lexing as jinja2 does it under transformers' settings (trim_blocks,
// lstrip_blocks, keep_trailing_newline=False), plus malformed-template errors with positions.
#include <gtest/gtest.h>

#include "render_util.h"

namespace es::test {
namespace {

TEST(JinjaLexer, PlainTextAndTrailingNewline) {
  EXPECT_EQ(Render(""), "");
  EXPECT_EQ(Render("hello"), "hello");
  EXPECT_EQ(Render("abc\n"), "abc");          // one trailing newline dropped
  EXPECT_EQ(Render("abc\n\n"), "abc\n");      // only one
  EXPECT_EQ(Render("a\r\nb\rc"), "a\nb\nc");  // newlines normalized
  EXPECT_EQ(Render("{ x } {x}"), "{ x } {x}");
}

TEST(JinjaLexer, TrimBlocksDropsFirstNewlineAfterBlockTags) {
  EXPECT_EQ(Render("a\n{% if true %}\nb\n{% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(Render("{% if true %}\n\nx{% endif %}"), "\nx");  // only one newline
  // Not after variable tags.
  EXPECT_EQ(Render("{{ 'a' }}\nb"), "a\nb");
  // `+%}` keeps the newline.
  EXPECT_EQ(Render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaLexer, LstripBlocksRemovesIndentationBeforeBlockTags) {
  EXPECT_EQ(Render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(Render("a\n    {% if true %}x{% endif %}"), "a\nx");
  EXPECT_EQ(Render("a  {% if true %}x{% endif %}"), "a  x");  // text before the tag on the line
  EXPECT_EQ(Render("  {{ 'x' }}"), "  x");                    // not before variable tags
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");   // `{%+` keeps it
  EXPECT_EQ(Render("a\n\t {% if true %}x{% endif %}"), "a\nx");
}

TEST(JinjaLexer, LstripDependsOnWhetherTheLineStarted) {
  // After a block tag that consumed its newline the next indentation is at a line start.
  EXPECT_EQ(Render("{% if true %}\n    {% if true %}x{% endif %}{% endif %}"), "x");
  // After a variable tag the line has not started.
  EXPECT_EQ(Render("{{ 'a' }}    {% if true %}x{% endif %}"), "a    x");
  // A block tag not followed by a newline: the spaces after it are not at a line start.
  EXPECT_EQ(Render("{% if true %}  {% if true %}x{% endif %}{% endif %}"), "  x");
}

TEST(JinjaLexer, MinusStripsAllWhitespace) {
  EXPECT_EQ(Render("x \n {%- if true %} y {%- endif %}"), "x y");
  EXPECT_EQ(Render("{% if true -%}   \n  y{% endif %}"), "y");
  EXPECT_EQ(Render("{{ 'a' -}}  \n\n b"), "ab");
  EXPECT_EQ(Render("x  \n{{- 'a' }}"), "xa");
  EXPECT_EQ(Render("a\n  {%- if true -%}\n  b  \n{%- endif -%}\n  c"), "abc");
  // Unicode whitespace counts as whitespace (Python's str.isspace).
  EXPECT_EQ(Render("x\u3000{%- if true %}y{% endif %}"), "xy");
}

TEST(JinjaLexer, Comments) {
  EXPECT_EQ(Render("a {# c #} b"), "a  b");
  EXPECT_EQ(Render("a\n  {# c #}\nb"), "a\nb");  // lstrip + trim apply to comments
  EXPECT_EQ(Render("{# multi\nline {{ not parsed }} #}x"), "x");
  EXPECT_EQ(Render("a  \n{#- c -#}  \nb"), "ab");
}

TEST(JinjaLexer, RawBlocks) {
  EXPECT_EQ(Render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(Render("{%- raw -%}  a  {%- endraw %}"), "a");
}

TEST(JinjaLexer, StringLiteralEscapes) {
  EXPECT_EQ(Render(R"({{ 'a\nb\tc\\d\'e' }})"), "a\nb\tc\\d'e");
  EXPECT_EQ(Render(R"({{ "q\"q" }})"), "q\"q");
  EXPECT_EQ(Render(R"({{ '\x41\u00e9\U0001F600\101' }})"), "A\u00e9\U0001F600A");
  EXPECT_EQ(Render(R"({{ '\d' }})"), "\\d");        // unknown escapes stay
  EXPECT_EQ(Render("{{ 'a' 'b' \"c\" }}"), "abc");  // adjacent literals concatenate
  EXPECT_EQ(Render("{{ '%}' }}{{ '}}' }}"), "%}}}");
  EXPECT_EQ(Render("{{ '<｜User｜>' }}"), "<｜User｜>");
}

TEST(JinjaLexer, Numbers) {
  EXPECT_EQ(Render("{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }} {{ 2E-2 }}"),
            "1000 31 5 15 1500.0 0.02");
}

TEST(JinjaLexer, ErrorsNamePositions) {
  std::string e = RenderError("{% if true %}x");
  EXPECT_NE(e.find("template:1:4"), std::string::npos) << e;
  EXPECT_NE(e.find("'if'"), std::string::npos) << e;
  e = RenderError("ab\ncd {{ x ");
  EXPECT_NE(e.find("template:2:4"), std::string::npos) << e;
  EXPECT_NE(e.find("}}"), std::string::npos) << e;
  e = RenderError("{# never closed");
  EXPECT_NE(e.find("template:1:1"), std::string::npos) << e;
  e = RenderError("{{ 'unterminated }}");
  EXPECT_NE(e.find("unterminated string"), std::string::npos) << e;
  e = RenderError("{{ a $ b }}");
  EXPECT_NE(e.find("template:1:6"), std::string::npos) << e;
  e = RenderError("{{ (1 }}");
  EXPECT_NE(e.find("unexpected '}'"), std::string::npos) << e;
  e = RenderError("{% raw %}never ended");
  EXPECT_NE(e.find("endraw"), std::string::npos) << e;
  EXPECT_THROW(jinja::Template("ok \xff\xfe"), es::Error);
  e = RenderError("ok\n\xc3(");
  EXPECT_NE(e.find("template:2:1"), std::string::npos) << e;
}

}  // namespace
}  // namespace es::test
