#pragma once
// The one way lockstep reads the JSON of its files (checkpoint records and pointers, saved
// models, safetensors headers). Parsing itself is iterative, but a value nested 100,000 deep is
// later walked recursively (dump() in an error message, conversions), which overflows the stack:
// so nesting is bounded on the raw bytes, before anything recurses. The field readers below are
// strict where nlohmann's get<T>() converts silently (4294967297 as int is 1, 2.7 as int is 2,
// -1 as uint64 is 2^64 - 1): a value a file cannot mean is an error naming the field.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lockstep::io::detail {

/// Deeper than any file lockstep writes (a saved model's layers nest 7 levels) by a wide margin.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text`; IOError "<what> is not valid JSON: <reason>" for a syntax error or for arrays
/// and objects nested deeper than kMaxJsonDepth (`what` names the file, e.g. "checkpoint 'p.json'").
nlohmann::json parse_json(std::string_view text, const std::string& what);

/// j[key], which must exist and be an integer (not a float, not a string) in [lo, hi]; IOError
/// "<what>: \"key\" is <value>, not an integer in [lo, hi]" otherwise.
std::int64_t integer_field(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi,
                           const std::string& what);
/// j[key] as a non-negative integer of the whole uint64 range (seeds).
std::uint64_t unsigned_field(const nlohmann::json& j, const char* key, const std::string& what);
/// j[key] as a finite number in [lo, hi] (an integer is accepted; null, inf and NaN are not).
double number_field(const nlohmann::json& j, const char* key, double lo, double hi, const std::string& what);
bool bool_field(const nlohmann::json& j, const char* key, const std::string& what);
std::string string_field(const nlohmann::json& j, const char* key, const std::string& what);

}  // namespace lockstep::io::detail
