// GPT-2's byte <-> unicode map (bytes_to_unicode): every byte becomes a printable character so
// byte-level BPE vocabularies are plain strings. Printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace es::tok {

// Maps every byte of `bytes` to its character (UTF-8, 1-2 bytes each).
std::string BytesToUnicode(std::string_view bytes);
void AppendBytesToUnicode(std::string_view bytes, std::string* out);
// The byte a character stands for, or -1 when `cp` is not in the map.
int UnicodeToByte(uint32_t cp);
// Code point that byte `b` maps to.
uint32_t ByteToCodePoint(uint8_t b);

}  // namespace es::tok
