#pragma once
// The one way lockstep parses the JSON of its files (checkpoint records and pointers, saved
// models, safetensors headers). Parsing itself is iterative, but a value nested 100,000 deep is
// later walked recursively (dump() in an error message, conversions), which overflows the stack:
// so nesting is bounded on the raw bytes, before anything recurses.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lockstep::io::detail {

/// Deeper than any file lockstep writes (a saved model's layers nest 7 levels) by a wide margin.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text`; IOError "<what> is not valid JSON: <reason>" for a syntax error or for arrays
/// and objects nested deeper than kMaxJsonDepth (`what` names the file, e.g. "checkpoint 'p.json'").
nlohmann::json parse_json(std::string_view text, const std::string& what);

}  // namespace lockstep::io::detail
