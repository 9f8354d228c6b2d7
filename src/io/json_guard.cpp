#include "io/json_guard.hpp"

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
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  check_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(what + " is not valid JSON: " + e.what());
  }
}

}  // namespace lockstep::io::detail
