// GBNF parsing (grammar.h): the syntax, the lowering of repetitions, and the refusals.
#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "grammar_util.h"

namespace es::grammar {
namespace {

std::string ErrorOf(const std::string& text) {
  try {
    Grammar::ParseGbnf(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool Matches(const std::string& gbnf, const std::string& text) {
  Matcher m(std::make_shared<Grammar>(Grammar::ParseGbnf(gbnf)), test::SmallVocab());
  return m.AcceptText(text) && m.accepting();
}

TEST(Gbnf, LiteralsClassesGroupsAndRepetitions) {
  const std::string g = R"(# a comment
root ::= greeting " " name ( "!" | "?" )? tail
greeting ::= "hi" | "hello"   # trailing comment
name ::= [A-Z] [a-z]*
tail ::= [0-9]{2,3}
)";
  EXPECT_TRUE(Matches(g, "hi Bob!12"));
  EXPECT_TRUE(Matches(g, "hello X123"));
  EXPECT_FALSE(Matches(g, "hello X1"));     // {2,3}: too few
  EXPECT_FALSE(Matches(g, "hello X1234"));  // too many
  EXPECT_FALSE(Matches(g, "hey Bob12"));
  EXPECT_FALSE(Matches(g, "hi bob12"));
  EXPECT_TRUE(Matches(R"(root ::= [^a-c]+ "\x41" "\u00e9" .)",
                      "zz"
                      "A"
                      "\xC3\xA9"
                      "\xE6\x97\xA5"));
  EXPECT_FALSE(Matches(R"(root ::= [^a-c]+)", "zab"));
  EXPECT_TRUE(Matches(R"(root ::= "a"{3} "b"{1,} "c"{0,1})", "aaabbb"));
  EXPECT_TRUE(Matches(R"(root ::= ("x" | "yz")+ "\"" "\\" "\n")", "xyzx\"\\\n"));
  // Rules may span lines; alternatives continue after '|'.
  EXPECT_TRUE(Matches("root ::= a\n  | b\na ::= \"1\"\nb ::= \"2\"", "2"));
}

TEST(Gbnf, RefusesBadGrammarsWithOneClearError) {
  EXPECT_NE(ErrorOf("root ::= missing").find("rule 'missing' is used but never defined"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a").find("unterminated string literal"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [z-a]").find("backwards"), std::string::npos);
  EXPECT_NE(ErrorOf("x ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= x \"a\"\nx ::= y\ny ::= \"\" | root").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\" root").find("can never be satisfied"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= []").find("can never be satisfied"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{5000}").find("limit"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')'))
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\" ) ").find("unexpected character"), std::string::npos);
  GrammarLimits small;
  small.max_text_bytes = 10;
  EXPECT_THROW(Grammar::ParseGbnf("root ::= \"abcdefgh\"", "root", small), Error);
}

TEST(Gbnf, UnproductiveAlternativesArePrunedSoEveryPrefixCanFinish) {
  // After "a" the only way on would be the endless "c" loop: the pruned grammar refuses "a".
  Matcher m(
      std::make_shared<Grammar>(Grammar::ParseGbnf("root ::= \"a\" x | \"b\"\nx ::= \"c\" x")),
      test::SmallVocab());
  EXPECT_FALSE(m.AcceptText("a"));
  EXPECT_TRUE(m.AcceptText("b"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
}

TEST(Gbnf, LiteralRoundTrip) {
  const std::string s = "a\"b\\c\nd\te\x01 é";
  EXPECT_TRUE(Matches("root ::= " + GbnfLiteral(s), s));
}

}  // namespace
}  // namespace es::grammar
