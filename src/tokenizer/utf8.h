// UTF-8 helpers for the tokenizer: lossy repair of invalid input (Rust's String::from_utf8_lossy:
// one U+FFFD per maximal invalid subsequence), code point iteration, and the Unicode character
// predicates the `tokenizers` library takes from Rust's char (is_whitespace, is_alphanumeric...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace es::tok {

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Returns `s` with every maximal invalid subsequence replaced by U+FFFD (EF BF BD).
std::string ToValidUtf8(std::string_view s);
// Length in bytes of the well-formed sequence starting at s[i]; 0 if s[i..] does not start one
// (invalid or truncated).
size_t ValidSeqLen(std::string_view s, size_t i);

// Decodes the code point at s[*i] (s must be valid UTF-8) and advances *i.
inline uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *i;
  const uint32_t c = p[0];
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  if (c < 0xE0) {
    *i += 2;
    return ((c & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (c < 0xF0) {
    *i += 3;
    return ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *i += 4;
  return ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}
// Byte length of the UTF-8 sequence whose lead byte is `lead`.
inline size_t Utf8Len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
void AppendUtf8(std::string* out, uint32_t cp);

// Rust char predicates (Unicode): White_Space; Alphabetic || Numeric (approximated by general
// categories L*, Nl, Other_Alphabetic marks Mn/Mc, N*); regex \w; punctuation (P* or ASCII
// punctuation); numeric (N*).
bool IsWhitespace(uint32_t cp);
bool IsAlphanumeric(uint32_t cp);
bool IsWordChar(uint32_t cp);
bool IsPunctuation(uint32_t cp);
bool IsNumeric(uint32_t cp);

// The one code point of `s`; throws es::Error "<where>: '<key>' must be one character" otherwise.
uint32_t SingleCodePoint(const std::string& s, const char* key, const std::string& where);

}  // namespace es::tok
