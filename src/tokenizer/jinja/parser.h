// Jinja parser: tokens -> statement tree, with jinja2's grammar and operator precedence
// (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary - + < postfix, filters,
// tests). Tags supported: for (else, loop filter), if/elif/else, set (plain, namespace
// attribute, tuple, block), macro, call, filter, with, break, continue, generation, print, raw.
// Any other tag, and any filter or test the interpreter does not implement, is an es::Error
// naming it and its line:column.
#pragma once

#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace es::jinja {

Body Parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace es::jinja
