// Split behaviors over match spans (NormalizedString::split in `tokenizers`).
#include "pieces.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "pcre_regex.h"

namespace es::tok {

SplitBehavior ParseSplitBehavior(const nlohmann::json& j, std::string_view where) {
  const std::string s = json_field::Get<std::string>(j, "behavior", where);
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  Fail(where, ": unknown split behavior '", s, "'");
}

std::string ReadPattern(const nlohmann::json& j, const std::string& where) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object())
    Fail(where, ": field 'pattern' must be an object {\"String\": ...} or {\"Regex\": ...}");
  const std::string wp = where + ".pattern";
  if (it->contains("String")) return Regex::Escape(json_field::Get<std::string>(*it, "String", wp));
  if (it->contains("Regex")) return json_field::Get<std::string>(*it, "Regex", wp);
  Fail(wp, ": must have 'String' or 'Regex'");
}

std::vector<MatchSpan> CoverWithMatches(size_t n, const std::vector<std::pair<size_t, size_t>>& m) {
  std::vector<MatchSpan> spans;
  if (n == 0) {
    spans.push_back({0, 0, false});
    return spans;
  }
  spans.reserve(m.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    if (prev != s) spans.push_back({prev, s, false});
    spans.push_back({s, e, true});
    prev = e;
  }
  if (prev != n) spans.push_back({prev, n, false});
  return spans;
}

void SplitPiece(const Piece& piece, std::vector<MatchSpan> spans, SplitBehavior behavior,
                std::vector<Piece>* out) {
  struct Range {
    size_t start, end;
    bool remove;
  };
  std::vector<Range> ranges;
  ranges.reserve(spans.size());
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) ranges.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : spans) ranges.push_back({s.start, s.end, s.is_match});
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == prev_match && !ranges.empty())
          ranges.back().end = s.end;
        else
          ranges.push_back({s.start, s.end, false});
        prev_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !prev_match && !ranges.empty())
          ranges.back().end = s.end;
        else
          ranges.push_back({s.start, s.end, false});
        prev_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !ranges.empty())
          ranges.back().start = it->start;
        else
          ranges.push_back({it->start, it->end, false});
        prev_match = it->is_match;
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
  }
  for (const auto& r : ranges) {
    if (r.remove || r.end == r.start) continue;
    Piece p;
    p.text = piece.text.substr(r.start, r.end - r.start);
    p.at_start = piece.at_start && r.start == 0;
    out->push_back(std::move(p));
  }
}

}  // namespace es::tok
