// Python str operations on UTF-8 strings, indexed by code point as Python does: whitespace as
// str.isspace() defines it, strip/split/replace/find with Python's exact edge cases (empty
// separators, maxsplit, negative indices), case mapping through utf8proc, repr() quoting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace es::jinja {

std::u32string DecodeUtf8(std::string_view s);  // input is valid UTF-8 (checked at the edges)
std::string EncodeUtf8(std::u32string_view s);
void AppendUtf8(char32_t c, std::string& out);
// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view s);
size_t CodepointCount(std::string_view s);

bool PyIsSpace(char32_t c);
// Decodes one code point at s[i] (valid UTF-8), advancing i.
char32_t NextCodepoint(std::string_view s, size_t& i);

// str.strip/lstrip/rstrip; chars = nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right);
// str.split / str.rsplit; sep = nullopt splits on whitespace runs. maxsplit < 0: no limit.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right);
std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);  // str.title()
std::string PyStrRepr(std::string_view s);
// Python slice of a sequence of length n: fills the selected indices.
std::vector<int64_t> PySliceIndices(int64_t n, std::optional<int64_t> start,
                                    std::optional<int64_t> stop, std::optional<int64_t> step);
bool PyIsDigit(std::string_view s);
bool PyIsAlpha(std::string_view s);
bool PyIsAlnum(std::string_view s);
bool PyIsUpper(std::string_view s);
bool PyIsLower(std::string_view s);
bool PyIsSpaceStr(std::string_view s);

}  // namespace es::jinja
