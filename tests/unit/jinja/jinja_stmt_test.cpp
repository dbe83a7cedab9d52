// Statements: for (loop variables, else, filters, break/continue, unpacking), if/elif/else,
// set (scoping rules, namespace attributes, tuples, blocks), macro/call, filter blocks, with,
// generation, raise_exception, and the errors for unsupported or misplaced tags.
#include <gtest/gtest.h>

#include "render_util.h"

namespace es::test {
namespace {

TEST(JinjaStmt, ForLoopVariables) {
  EXPECT_EQ(
      Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
             "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
      "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.previtem|default('-') }}{{ "
                   "loop.nextitem|default('-') }} {% endfor %}"),
            "-2 13 2- ");
  EXPECT_EQ(Render("{% for x in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
  EXPECT_EQ(Render("{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}"), "TrueFalseTrue");
  EXPECT_EQ(Render("{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}"), "10");
}

TEST(JinjaStmt, ForElseFilterBreakContinue) {
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in [1] %}x{% else %}empty{% endfor %}"), "x");
  EXPECT_EQ(Render("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}"),
            "15,35,55,75,95,");
  EXPECT_EQ(Render("{% for x in [2, 4] if x is odd %}{{ x }}{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(Render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(
      Render("{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b == 2 %}{% break %}{% endif %}"
             "{{ a }}{{ b }} {% endfor %}{% endfor %}"),
      "11 21 ");
}

TEST(JinjaStmt, ForUnpackingAndIterables) {
  EXPECT_EQ(Render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
  EXPECT_EQ(Render("{% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}"), "12");
  EXPECT_EQ(Render("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"), "xy");
  EXPECT_EQ(Render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(
      Render("{% for m in messages[::-1] %}{{ m }}{% endfor %}", R"({"messages": [1, 2, 3]})"),
      "321");
  EXPECT_EQ(Render("{% for a in [1, 2] %}{% set outer = loop %}{% for b in [1, 2] %}"
                   "{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}"),
            "11 12 21 22 ");
  EXPECT_NE(RenderError("{% for x in 5 %}{% endfor %}").find("'int' object is not iterable"),
            std::string::npos);
  EXPECT_NE(
      RenderError("{% for a, b in [[1, 2, 3]] %}{% endfor %}").find("too many values to unpack"),
      std::string::npos);
}

TEST(JinjaStmt, IfElifElse) {
  const char* t =
      "{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}many{% endif %}";
  EXPECT_EQ(Render(t, R"({"x": 1})"), "one");
  EXPECT_EQ(Render(t, R"({"x": 2})"), "two");
  EXPECT_EQ(Render(t, R"({"x": 3})"), "three");
  EXPECT_EQ(Render(t, R"({"x": 9})"), "many");
  EXPECT_EQ(Render("{% if [] %}a{% elif {} %}b{% endif %}"), "");
}

TEST(JinjaStmt, SetScoping) {
  // Assignments inside a loop body do not leak out of the loop, nor into the next iteration.
  EXPECT_EQ(
      Render(
          "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"),
      "12121");
  // `if` blocks share the enclosing scope.
  EXPECT_EQ(Render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(Render("{% set t = 1, 2 %}{{ t }}"), "(1, 2)");
  EXPECT_EQ(Render("{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]"), "[a1b]");
  EXPECT_EQ(Render("{% set x | upper %}ab{% endset %}{{ x }}"), "AB");
  // Context variables can be shadowed.
  EXPECT_EQ(Render("{% set add_generation_prompt = false %}{{ add_generation_prompt }}",
                   R"({"add_generation_prompt": true})"),
            "False");
  // Lists are shared by reference, as in Python.
  EXPECT_EQ(Render("{% set a = xs %}{{ a is sameas xs }}", R"({"xs": [1]})"), "True");
}

TEST(JinjaStmt, Namespace) {
  EXPECT_EQ(
      Render("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
             "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
      "6 0123");
  EXPECT_EQ(Render("{% set ns = namespace() %}{% set ns.found = true %}{{ ns.found }} {{ "
                   "ns.missing is defined }}"),
            "True False");
  EXPECT_EQ(Render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}"),
            "121");
  EXPECT_EQ(Render("{% set ns = namespace(a=1) %}{{ ns }}"), "<Namespace {'a': 1}>");
  std::string e = RenderError("{% set d = {} %}{% set d.x = 1 %}");
  EXPECT_NE(e.find("non-namespace object"), std::string::npos) << e;
}

TEST(JinjaStmt, Macros) {
  EXPECT_EQ(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}"),
            "Hi A! Hi B? Hi C!");
  EXPECT_EQ(Render("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}"), "[]");
  EXPECT_EQ(Render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "(1, 2){'k': 3}");
  EXPECT_EQ(
      Render(
          "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
      "321");
  // Macros see variables of the scope they were defined in.
  EXPECT_EQ(Render("{% set sep = '-' %}{% macro j(a, b) %}{{ a }}{{ sep }}{{ b }}{% endmacro %}{{ "
                   "j(1, 2) }}"),
            "1-2");
  EXPECT_EQ(
      Render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}"),
      "<in>");
  EXPECT_EQ(Render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}"),
            "[1][2]");
  EXPECT_NE(RenderError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursion"),
            std::string::npos);
}

TEST(JinjaStmt, FilterWithGenerationPrint) {
  EXPECT_EQ(Render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(Render("{% filter trim|upper %}  ab  {% endfilter %}"), "AB");
  EXPECT_EQ(Render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}"), "3False");
  EXPECT_EQ(Render("a{% generation %}b{{ 'c' }}{% endgeneration %}d"), "abcd");
  EXPECT_EQ(Render("{% print 'x' ~ 1 %}"), "x1");
}

TEST(JinjaStmt, RaiseExceptionCarriesTheMessage) {
  const std::string t =
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Unsupported role: ' ~ m.role) }}{% endif %}{{ m.content }}{% endfor %}";
  EXPECT_EQ(Render(t, R"({"messages": [{"role": "user", "content": "hi"}]})"), "hi");
  try {
    Render(t, R"({"messages": [{"role": "tool", "content": "x"}]})");
    FAIL() << "expected an exception";
  } catch (const jinja::RaisedError& e) {
    EXPECT_STREQ(e.what(), "Unsupported role: tool");
  }
}

TEST(JinjaStmt, StrftimeNow) {
  const std::string year = Render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(JinjaStmt, UnsupportedAndMisplacedTags) {
  std::string e = RenderError("ab\n{% include 'x.jinja' %}");
  EXPECT_NE(e.find("template:2:4"), std::string::npos) << e;
  EXPECT_NE(e.find("include"), std::string::npos) << e;
  e = RenderError("{% extends 'base' %}");
  EXPECT_NE(e.find("extends"), std::string::npos) << e;
  e = RenderError("{% do x.append(1) %}");
  EXPECT_NE(e.find("'{% do %}'"), std::string::npos) << e;
  e = RenderError("{% frobnicate %}");
  EXPECT_NE(e.find("unknown tag 'frobnicate'"), std::string::npos) << e;
  e = RenderError("{% for x in y recursive %}{% endfor %}");
  EXPECT_NE(e.find("recursive"), std::string::npos) << e;
  e = RenderError("x{% endif %}");
  EXPECT_NE(e.find("template:1:5"), std::string::npos) << e;
  EXPECT_NE(e.find("endif"), std::string::npos) << e;
  e = RenderError("{% break %}");
  EXPECT_NE(e.find("outside of a for loop"), std::string::npos) << e;
  e = RenderError("{{ x | frobnicate }}");
  EXPECT_NE(e.find("template:1:8"), std::string::npos) << e;
  EXPECT_NE(e.find("filter 'frobnicate'"), std::string::npos) << e;
  e = RenderError("{{ x is frobnicated }}");
  EXPECT_NE(e.find("test 'frobnicated'"), std::string::npos) << e;
  e = RenderError("{{ }}");
  EXPECT_NE(e.find("expected an expression"), std::string::npos) << e;
  e = RenderError("{% for x in [1] %}{% endif %}");
  EXPECT_NE(e.find("endif"), std::string::npos) << e;
  e = RenderError("{% set 1 = 2 %}");
  EXPECT_NE(e.find("can't assign"), std::string::npos) << e;
  e = RenderError("{{ x is defined is defined }}");
  EXPECT_NE(e.find("chain"), std::string::npos) << e;
}

}  // namespace
}  // namespace es::test
