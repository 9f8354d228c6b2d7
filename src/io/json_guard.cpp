#include "io/json_guard.hpp"

#include <cmath>

#include "lockstep/core/error.hpp"

namespace lockstep::io::detail {

namespace {
// The depth of [ and { outside strings; stops at the first byte past the limit.
void check_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw IOError(::lockstep::detail::concat(what, " is not valid JSON: arrays and objects are nested deeper than ",
                                                 kMaxJsonDepth, " levels (at byte ", i,
                                                 "); no file lockstep writes nests that deep"));
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced brackets are the parser's to report
    }
  }
}

// The field, or IOError naming it; short values are quoted in messages, long ones elided.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& what) {
  if (!j.is_object()) throw IOError(what + ": expected an object holding \"" + key + "\", got " + std::string(j.type_name()));
  const auto it = j.find(key);
  if (it == j.end()) throw IOError(what + ": no \"" + key + "\"");
  return *it;
}
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();  // bounded depth: parse_json made every value we read
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}
[[noreturn]] void mistyped(const std::string& what, const char* key, const nlohmann::json& v, const std::string& want) {
  throw IOError(what + ": \"" + key + "\" is " + shown(v) + ", not " + want);
}
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  check_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(what + " is not valid JSON: " + e.what());
  }
}

std::int64_t integer_field(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi,
                           const std::string& what) {
  const auto& v = field(j, key, what);
  const std::string want = ::lockstep::detail::concat("an integer in [", lo, ", ", hi, "]");
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (hi >= 0 && u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo) return static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= lo && i <= hi) return i;
  }
  mistyped(what, key, v, want);
}

std::uint64_t unsigned_field(const nlohmann::json& j, const char* key, const std::string& what) {
  const auto& v = field(j, key, what);
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  mistyped(what, key, v, "an integer in [0, 2^64)");
}

double number_field(const nlohmann::json& j, const char* key, double lo, double hi, const std::string& what) {
  const auto& v = field(j, key, what);
  if (v.is_number()) {
    const auto d = v.get<double>();
    if (std::isfinite(d) && d >= lo && d <= hi) return d;
  }
  mistyped(what, key, v, ::lockstep::detail::concat("a finite number in [", lo, ", ", hi, "]"));
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& what) {
  const auto& v = field(j, key, what);
  if (!v.is_boolean()) mistyped(what, key, v, "true or false");
  return v.get<bool>();
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& what) {
  const auto& v = field(j, key, what);
  if (!v.is_string()) mistyped(what, key, v, "a string");
  return v.get<std::string>();
}

}  // namespace lockstep::io::detail
