// Pieces: the text fragments that flow through the encode pipeline (what `tokenizers` calls the
// splits of a PreTokenizedString), and the split machinery shared by pre-tokenizers: a list of
// (range, is_match) covering a piece is turned into sub-pieces by one of the five
// SplitDelimiterBehaviors. Offsets are not tracked (edgeseek needs ids, not offsets); the one
// offset fact a component reads, "this piece starts at offset 0 of the input" (Metaspace's
// prepend_scheme "first"), travels as `at_start`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace es::tok {

struct Piece {
  std::string text;
  int32_t added_id = -1;  // >= 0: an added token already resolved; never split or normalized
  bool at_start = false;  // starts at byte 0 of the original input
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// The "behavior" field of the component `j` (a Split or Punctuation pre-tokenizer at `where`).
SplitBehavior ParseSplitBehavior(const nlohmann::json& j, std::string_view where);
// The regex source of the "pattern" field of `j` ({"String": s}: s escaped; {"Regex": r}: r),
// for Split pre-tokenizers and Replace normalizers/decoders; a wrong shape or type names the
// path ("<where>.pattern: field 'Regex' must be a string (got number)").
std::string ReadPattern(const nlohmann::json& j, const std::string& where);

struct MatchSpan {
  size_t start, end;
  bool is_match;
};

// Turns non-overlapping match ranges into spans covering [0, n) (gaps are non-matches), as
// `tokenizers`' Pattern::find_matches does; an empty text gives one empty non-match.
std::vector<MatchSpan> CoverWithMatches(size_t n, const std::vector<std::pair<size_t, size_t>>& m);
// Appends the sub-pieces of `piece` to `out` (empty ones dropped), following `behavior`.
void SplitPiece(const Piece& piece, std::vector<MatchSpan> spans, SplitBehavior behavior,
                std::vector<Piece>* out);

}  // namespace es::tok
