// Expressions with Python semantics: literals and their str(), operators and precedence,
// subscripts and slices, undefined values, tests, filters and str/dict methods. Expected
// strings are what jinja2 3.1 on CPython renders.
#include <gtest/gtest.h>

#include "render_util.h"

namespace es::test {
namespace {

TEST(JinjaExpr, LiteralsRenderLikePythonStr) {
  EXPECT_EQ(Render("{{ 1 }} {{ -3 }} {{ true }} {{ False }} {{ none }} {{ None }}"),
            "1 -3 True False None None");
  EXPECT_EQ(Render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 1e16 }} {{ 123456.789 }}"),
            "1.0 0.30000000000000004 1e+20 1.5e-05 1e+16 123456.789");
  EXPECT_EQ(Render("{{ 1e15 }} {{ 0.0001 }} {{ -0.0 }}"), "1000000000000000.0 0.0001 -0.0");
  EXPECT_EQ(Render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(Render("{{ {'a': 1, 'b': [2]} }}"), "{'a': 1, 'b': [2]}");
  EXPECT_EQ(Render("{{ (1,) }} {{ (1, 2) }} {{ () }} {{ [] }} {{ {} }}"), "(1,) (1, 2) () [] {}");
  EXPECT_EQ(Render(R"({{ ["it's", 'q"', "a\nb", 'é'] }})"), R"(["it's", 'q"', 'a\nb', 'é'])");
  EXPECT_EQ(Render("{{ x }}", R"({"x": {"k": [1, 2.5, null, false, "s"]}})"),
            "{'k': [1, 2.5, None, False, 's']}");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"),
            "7 9 64 4");
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}"),
            "3 -4 1 2 3.5 2.0");
  EXPECT_EQ(Render("{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }}"), "3.0 0.5 2.5 2");
  EXPECT_EQ(Render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' + 'b' }} {{ [1] + [2] }}"),
            "ababab [1, 1] ab [1, 2]");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none ~ true ~ missing ~ 2.0 }}"), "a1NoneTrue2.0");
  EXPECT_EQ(Render("{{ 'a' ~ 2 * 3 }}"), "a6");
  // `~` binds tighter than `+`: 1 + ('2' ~ 6) is int + str.
  EXPECT_NE(RenderError("{{ 1 + 2 ~ 3 * 2 }}").find("for +: 'int' and 'str'"), std::string::npos);
}

TEST(JinjaExpr, PathologicalInputsFailCleanly) {
  EXPECT_EQ(Render("{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"),
            "b [3]");
  EXPECT_EQ(Render("{{ 1 ** 1000000000000 }} {{ (-1) ** 3 }} {{ 0 ** 0 }} {{ 3 ** 39 }}"),
            "1 -1 1 4052555153018976267");
  EXPECT_NE(RenderError("{{ 3 ** 40 }}").find("OverflowError"), std::string::npos);
  EXPECT_NE(RenderError("{{ 'ab' * 1000000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(RenderError("{{ 9223372036854775807 + 1 }}").find("OverflowError"), std::string::npos);
  const std::string deep = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  EXPECT_NE(RenderError(deep).find("nesting too deep"), std::string::npos);
  std::string nested;
  for (int i = 0; i < 300; ++i) nested += "{% if true %}";
  EXPECT_NE(RenderError(nested).find("nesting too deep"), std::string::npos);
  EXPECT_EQ(Render("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}"), "7");
}

TEST(JinjaExpr, ArithmeticErrors) {
  EXPECT_NE(RenderError("{{ 1 + 'a' }}").find("unsupported operand type(s) for +: 'int' and 'str'"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(RenderError("{{ missing + 1 }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(RenderError("{{ 1 < 'a' }}").find("not supported between instances of 'int' and 'str'"),
            std::string::npos);
}

TEST(JinjaExpr, ComparisonsAndLogic) {
  EXPECT_EQ(
      Render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }}"),
      "True False True True True");
  EXPECT_EQ(
      Render("{{ [1, 2] == [1, 2] }} {{ [1] == (1,) }} {{ {'a': 1} == {'a': 1} }} {{ 'b' > 'a' }}"),
      "True False True True");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(Render("{{ 'x' in missing }} {{ missing == missing }} {{ missing == none }}"),
            "False True False");
  EXPECT_EQ(Render("[{{ 0 or 'x' }}] [{{ 1 and 'y' }}] [{{ '' and 'z' }}] [{{ none or [] }}]"),
            "[x] [y] [] [[]]");
  EXPECT_EQ(Render("{{ not 1 == 2 }} {{ not none }} {{ not [] }} {{ not 'a' }}"),
            "True True True False");
  EXPECT_EQ(Render("[{{ 'a' if false }}] [{{ 'a' if 0 else 'b' }}] [{{ 'c' if 1 else 'd' }}]"),
            "[] [b] [c]");
  EXPECT_NE(RenderError("{{ 1 in 'abc' }}").find("requires string as left operand"),
            std::string::npos);
}

TEST(JinjaExpr, SubscriptsAndSlices) {
  EXPECT_EQ(
      Render("{{ [1, 2, 3][-1] }} {{ [1, 2, 3][::-1] }} {{ [1, 2, 3][1:] }} {{ [1, 2, 3][:-1] }}"),
      "3 [3, 2, 1] [2, 3] [1, 2]");
  EXPECT_EQ(Render("{{ 'hello'[1:3] }} {{ 'héllo'[1] }} {{ 'abc'[::-1] }} {{ 'abcdef'[::2] }} {{ "
                   "'abc'[-2:] }}"),
            "el é cba ace bc");
  EXPECT_EQ(Render("{{ [0, 1, 2, 3, 4][4:0:-2] }} {{ [1, 2][5:] }} {{ (1, 2, 3)[1:] }}"),
            "[4, 2] [] (2, 3)");
  EXPECT_EQ(Render("{{ d.a }} {{ d['a'] }} {{ d.l.1 }} {{ d['l'][0] }}",
                   R"({"d": {"a": "x", "l": [5, 6]}})"),
            "x x 6 5");
}

TEST(JinjaExpr, UndefinedBehavesLikeJinjaDefaultUndefined) {
  const char* ctx = R"({"d": {}, "n": null, "xs": [1], "s": "str"})";
  EXPECT_EQ(Render("[{{ missing }}]", ctx), "[]");
  EXPECT_EQ(
      Render("{{ missing is defined }} {{ d.nokey is defined }} {{ d['nokey'] is undefined }}",
             ctx),
      "False False True");
  EXPECT_EQ(Render("{{ n.x is defined }} {{ n['x'] is defined }} {{ xs[5] is defined }} {{ s.nope "
                   "is defined }}",
                   ctx),
            "False False False False");
  EXPECT_EQ(
      Render("{% if missing %}y{% else %}n{% endif %}{% for x in missing %}x{% endfor %}", ctx),
      "n");
  EXPECT_EQ(Render("{{ missing|length }} {{ missing|default('dflt') }} [{{ missing|trim }}]", ctx),
            "0 dflt []");
  std::string e = RenderError("line\n  {{ missing.x }}", ctx);
  EXPECT_NE(e.find("template:2:13"), std::string::npos) << e;
  EXPECT_NE(e.find("'missing' is undefined"), std::string::npos) << e;
  e = RenderError("{{ d.nokey.x }}", ctx);
  EXPECT_NE(e.find("'dict object' has no attribute 'nokey'"), std::string::npos) << e;
  e = RenderError("{{ xs[3]['role'] }}", ctx);
  EXPECT_NE(e.find("list object has no element 3"), std::string::npos) << e;
  EXPECT_NE(RenderError("{{ missing() }}", ctx).find("'missing' is undefined"), std::string::npos);
}

TEST(JinjaExpr, Tests) {
  EXPECT_EQ(
      Render("{{ 3 is odd }} {{ 4 is even }} {{ 4 is divisibleby 2 }} {{ 5 is divisibleby(2) }}"),
      "True True True False");
  EXPECT_EQ(
      Render("{{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }}"),
      "True True True True");
  EXPECT_EQ(
      Render("{{ 1 is number }} {{ true is number }} {{ true is boolean }} {{ 1 is boolean }}"),
      "True True True False");
  EXPECT_EQ(
      Render("{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ none is none }}"),
      "True False True True");
  EXPECT_EQ(Render("{{ [] is iterable }} {{ 1 is iterable }} {{ 1 is true }} {{ true is true }} {{ "
                   "false is false }}"),
            "True False False True True");
  EXPECT_EQ(
      Render(
          "{{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 1 is lessthan 2 }} {{ 1 is ne 2 }} {{ 2 is ge 2 }}"),
      "True True True True True");
  EXPECT_EQ(
      Render("{{ 2 is in [1, 2] }} {{ x is sameas false }} {{ 'ab' is lower }} {{ 'AB' is upper }}",
             R"({"x": false})"),
      "True True True True");
  EXPECT_EQ(
      Render("{{ x is not none }} {{ not x is none }} {{ x is defined and x }}", R"({"x": 0})"),
      "True True 0");
  EXPECT_EQ(Render("{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}"),
            "True False True");
}

TEST(JinjaExpr, FilterPrecedence) {
  EXPECT_EQ(Render("{{ 'abc' | upper + 'd' }}"), "ABCd");
  EXPECT_EQ(Render("{{ -1|abs }} {{ - 2.5|abs }}"), "1 2.5");
  EXPECT_EQ(Render("{{ ' a '|trim|length }}"), "1");
  EXPECT_EQ(Render("{{ 'x' + y | trim + 'z' }}", R"({"y": "  Y  "})"), "xYz");
}

TEST(JinjaExpr, StringFilters) {
  EXPECT_EQ(Render("[{{ '  a b \n'|trim }}] [{{ 'xxaxx'|trim('x') }}]"), "[a b] [a]");
  EXPECT_EQ(Render("{{ 'hello WORLD'|capitalize }}|{{ 'hello-world foo(bar) it\\'s'|title }}"),
            "Hello world|Hello-World Foo(Bar) It's");
  EXPECT_EQ(Render("{{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|upper }} {{ 'ÀB'|lower }}"),
            "bba ABC àb");
  EXPECT_EQ(Render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> "
                   "', blank=true) }}"),
            "a\n  b\n\n  c|  a\n  b|a\n> \n> b");
  EXPECT_EQ(Render(R"({{ ('<a href="x">&' ~ "'") | e }})"), "&lt;a href=&#34;x&#34;&gt;&amp;&#39;");
  EXPECT_EQ(
      Render("[{{ 'ab'|center(6) }}] [{{ 'ab'|center(5) }}] {{ 'hello big world'|wordcount }}"),
      "[  ab  ] [  ab ] 3");
  EXPECT_EQ(Render("{{ 42|string ~ 'x' }} {{ [1]|string }} {{ 'ab'|safe }}"), "42x [1] ab");
}

TEST(JinjaExpr, NumberFilters) {
  EXPECT_EQ(Render("{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ "
                   "'0x1A'|int(0, 16) }} {{ 3.9|int }}"),
            "43 4 0 7 26 3");
  EXPECT_EQ(Render("{{ '2.5'|float }} {{ 3|float }} {{ 'no'|float }} {{ ' 1_0 '|int }}"),
            "2.5 3.0 0.0 10");
  EXPECT_EQ(Render("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') "
                   "}} {{ 42|round }} {{ 2.19|round(1, 'floor') }}"),
            "2.0 4.0 2.67 3.0 42 2.1");
  EXPECT_EQ(Render("{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} "
                   "{{ []|sum }}"),
            "1 3 6 3.5 0");
  EXPECT_EQ(Render("{{ -3|abs }} {{ [1, 2, 3]|count }}"), "3 3");
}

TEST(JinjaExpr, SequenceFilters) {
  EXPECT_EQ(Render("{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }}"), "5 2 1");
  EXPECT_EQ(Render("[{{ missing|default('x') }}] [{{ ''|default('y') }}] [{{ ''|default('y', true) "
                   "}}] [{{ none|default('z') }}] [{{ 0|d('w', boolean=true) }}]"),
            "[x] [] [y] [None] [w]");
  EXPECT_EQ(Render("{{ [1, 'a', none]|join(', ') }} {{ [1, 2]|join }}"), "1, a, None 12");
  EXPECT_EQ(Render("{{ 'abc'|list }} {{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ []|first is "
                   "defined }} {{ 'xy'|last }}"),
            "['a', 'b', 'c'] 1 3 False y");
  EXPECT_EQ(Render("{{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A']|unique(true)|list }}"),
            "['a', 'b'] ['a', 'A']");
  EXPECT_EQ(Render("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, "
                   "2]|sort(reverse=true) }} {{ ['b', 'A']|sort(case_sensitive=true) }}"),
            "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] ['A', 'b']");
  EXPECT_EQ(Render("{{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ {'a': 1, 'b': 2}|list }}"),
            "cba [2, 1] ['a', 'b']");
  EXPECT_EQ(Render("{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}"),
            "a2b1");
  EXPECT_EQ(Render("{% for k, v in {'b': 1, 'a': 2}|items %}{{ k }}={{ v }};{% endfor %}"),
            "b=1;a=2;");
  EXPECT_EQ(Render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
}

TEST(JinjaExpr, SelectMapFilters) {
  const char* ctx =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                                      {"role": "user", "content": "V", "name": "n"}],
                        "users": [{"n": "b", "age": 3}, {"n": "a", "age": 1}, {"n": "c", "age": 2}]})";
  EXPECT_EQ(
      Render("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join }}",
             ctx),
      "UV");
  EXPECT_EQ(Render("{{ messages|rejectattr('role', 'eq', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(Render("{{ messages|selectattr('name')|list|length }} {{ messages|selectattr('name', "
                   "'defined')|list|length }}",
                   ctx),
            "1 1");
  EXPECT_EQ(Render("{{ messages|map(attribute='role')|list }}", ctx), "['system', 'user', 'user']");
  EXPECT_EQ(Render("{{ messages|map(attribute='name', default='-')|join }}", ctx), "--n");
  EXPECT_EQ(Render("{{ ['a', 'B']|map('upper')|join }} {{ [' a ']|map('trim')|list }}"),
            "AB ['a']");
  EXPECT_EQ(Render("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ "
                   "[0, 1, '']|select|list }}"),
            "[1, 3] [2, 4] [1]");
  EXPECT_EQ(Render("{{ users|sort(attribute='age')|map(attribute='n')|join }} {{ users|join(',', "
                   "attribute='n') }}",
                   ctx),
            "acb b,a,c");
  EXPECT_EQ(
      Render("{{ (users|max(attribute='age')).n }} {{ (users|min(attribute='age')).n }}", ctx),
      "b a");
  // Generators: truthy even when empty, no len().
  EXPECT_EQ(Render("{% if [1]|select('even') %}yes{% endif %}"), "yes");
  EXPECT_NE(RenderError("{{ [1]|select|length }}").find("has no len()"), std::string::npos);
}

TEST(JinjaExpr, ToJsonMatchesPythonJsonDumps) {
  const char* ctx = R"({"d": {"b": 1, "a": [1, 2.5, null, true], "c": "é\"\n<>&\u0001", "e": {}}})";
  EXPECT_EQ(Render("{{ d|tojson }}", ctx),
            R"({"b": 1, "a": [1, 2.5, null, true], "c": "é\"\n<>&\u0001", "e": {}})");
  EXPECT_EQ(Render("{{ d.a|tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(Render("{{ {'a': [1, {'b': []}]}|tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
  EXPECT_EQ(Render("{{ 'é😀'|tojson(ensure_ascii=true) }}"), R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}"), R"({"a": 2, "b": 1})");
  EXPECT_EQ(Render("{{ {'b': [1, 2]}|tojson(separators=(',', ':')) }}"), R"({"b":[1,2]})");
  EXPECT_EQ(Render("{{ 'x'|tojson }} {{ 1.0|tojson }} {{ none|tojson }} {{ (1, 2)|tojson }} {{ {1: "
                   "2}|tojson }}"),
            R"("x" 1.0 null [1, 2] {"1": 2})");
  EXPECT_NE(RenderError("{{ missing|tojson }}").find("not JSON serializable"), std::string::npos);
}

TEST(JinjaExpr, StringMethods) {
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
                   "{{ 'a b c'.rsplit(' ', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c']");
  EXPECT_EQ(Render("{{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ "
                   "'x</think>y'.split('</think>')[0] }}"),
            "z x");
  EXPECT_EQ(Render("[{{ s.lstrip('\\n') }}] [{{ s.rstrip() }}] [{{ s.strip() }}] [{{ "
                   "'xxhixx'.strip('x') }}]",
                   R"({"s": "\n\nhi \n"})"),
            "[hi \n] [\n\nhi] [hi] [hi]");
  EXPECT_EQ(Render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ "
                   "'hello'.startswith('l', 2) }}"),
            "True True True");
  EXPECT_EQ(Render("{{ 'aXa'.replace('a', 'b') }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ "
                   "'hello world'.title() }} {{ 'hELLO'.capitalize() }}"),
            "bXb ABC abc Hello World Hello");
  EXPECT_EQ(Render("{{ 'héllo'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ "
                   "'banana'.count('an') }}"),
            "2 3 -1 2");
  EXPECT_EQ(Render("{{ ', '.join(['a', 'b']) }} {{ '{} and {name}'.format(1, name='x') }} {{ "
                   "'{{}}{0}'.format(7) }}"),
            "a, b 1 and x {}7");
  EXPECT_EQ(
      Render("{{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ ''.isdigit() }}"),
      "True True True False");
  EXPECT_EQ(
      Render("{{ 'a=b=c'.partition('=') }} {{ 'pre_x'.removeprefix('pre_') }} {{ '7'.zfill(3) }}"),
      "('a', '=', 'b=c') x 007");
  EXPECT_EQ(Render("{{ 'a\\nb\\r\\nc'.splitlines() }}"), "['a', 'b', 'c']");
  EXPECT_NE(RenderError("{{ 'a'.split('') }}").find("empty separator"), std::string::npos);
  EXPECT_NE(RenderError("{{ 'a'.encode() }}").find("not supported"), std::string::npos);
}

TEST(JinjaExpr, DictAndListMethods) {
  const char* ctx = R"({"d": {"a": 1, "b": 2, "items": "shadowed"}})";
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", ctx),
            "a1b2itemsshadowed");
  EXPECT_EQ(Render("{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 9) }} "
                   "{{ d.get('z') }}",
                   ctx),
            "['a', 'b', 'items'] [1, 2, 'shadowed'] 1 9 None");
  EXPECT_EQ(Render("{{ d['items'] }}", ctx), "shadowed");  // subscript finds the key first
  EXPECT_EQ(Render("{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}"), "2 1");
  EXPECT_NE(RenderError("{{ [1].append(2) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(RenderError("{{ d.update({}) }}", ctx).find("unsafe"), std::string::npos);
  EXPECT_EQ(Render("{{ dict(a=1) }} {{ dict({'x': 1}, y=2) }}"), "{'a': 1} {'x': 1, 'y': 2}");
}

}  // namespace
}  // namespace es::test
