// Jinja lexer with the settings transformers uses (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): splits a template into data and tag tokens, applying the
// whitespace rules exactly as jinja2's regex lexer does — `{%-`/`-%}` strip all whitespace,
// `{%+`/`+%}` keep it, a block or comment tag alone on its line loses its indentation, the first
// newline after `%}` or `#}` is dropped; comments vanish; `{% raw %}` bodies become data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace es::jinja {

enum class Tok : uint8_t {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type;
  std::string text;  // data text, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1, col = 1;
};

// Newlines (\r\n, \r) are normalized to \n and one trailing newline is dropped first.
// Throws es::Error "<name>:<line>:<col>: ..." for malformed input.
std::vector<Token> Lex(const std::string& source, const std::string& name);

// Formats a position for error messages: "<name>:<line>:<col>".
std::string Where(const std::string& name, int line, int col);

}  // namespace es::jinja
