// Byte-level map tables, built once.
#include "byte_level.h"

#include <array>

#include "utf8.h"

namespace es::tok {
namespace {

struct Tables {
  std::array<uint32_t, 256> cp{};
  std::array<char, 512> utf8{};  // 2 bytes per byte (second 0 when 1 byte)
  std::array<uint8_t, 256> len{};
  std::array<int16_t, 0x144> rev{};
  Tables() {
    rev.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cp[b] = keep ? uint32_t(b) : uint32_t(256 + n++);
      rev[cp[b]] = int16_t(b);
      std::string s;
      AppendUtf8(&s, cp[b]);
      len[b] = uint8_t(s.size());
      utf8[2 * b] = s[0];
      utf8[2 * b + 1] = s.size() > 1 ? s[1] : 0;
    }
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

}  // namespace

void AppendBytesToUnicode(std::string_view bytes, std::string* out) {
  const Tables& t = T();
  for (const char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out->append(&t.utf8[2 * b], t.len[b]);
  }
}

std::string BytesToUnicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  AppendBytesToUnicode(bytes, &out);
  return out;
}

int UnicodeToByte(uint32_t cp) { return cp < 0x144 ? T().rev[cp] : -1; }
uint32_t ByteToCodePoint(uint8_t b) { return T().cp[b]; }

}  // namespace es::tok
