#include "lockstep/training/filepath_format.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "lockstep/core/error.hpp"

namespace lockstep {

namespace {
struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 (default: right for numbers)
  char sign = '-';
  bool zero = false;
  int width = 0;
  bool comma = false;
  int precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& s, const std::string& templ) {
  Spec sp;
  std::size_t i = 0;
  const auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '0') {
    sp.zero = true;
    ++i;
  }
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) sp.width = sp.width * 10 + (s[i++] - '0');
  if (i < s.size() && s[i] == ',') {
    sp.comma = true;
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    LOCKSTEP_CHECK(i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])), "filepath template '", templ,
                   "': format spec '", s, "' has '.' without a precision");
    sp.precision = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
      sp.precision = sp.precision * 10 + (s[i++] - '0');
  }
  if (i < s.size()) sp.type = s[i++];
  LOCKSTEP_CHECK(i == s.size() && (sp.type == 0 || std::string("dfFeEgG%").find(sp.type) != std::string::npos),
                 "filepath template '", templ, "': format spec '", s, "' is not supported (types: d f F e E g G %)");
  return sp;
}

std::string group_thousands(const std::string& digits) {
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string render(const Spec& sp, bool is_int, std::int64_t iv, double dv, const std::string& name,
                   const std::string& templ) {
  LOCKSTEP_CHECK(!(sp.type == 'd' && !is_int), "filepath template '", templ, "': '{", name,
                 ":...d}' formats a float as an integer (Python raises here too); use .0f");
  const double v = is_int ? static_cast<double>(iv) : dv;
  const bool neg = std::signbit(v) && !(is_int && iv == 0);
  std::string body;  // without sign
  if (is_int && (sp.type == 0 || sp.type == 'd')) {
    body = std::to_string(iv < 0 ? -iv : iv);
    if (sp.comma) body = group_thousands(body);
  } else if (sp.type == 0 && sp.precision < 0) {
    body = float_repr(std::fabs(v));
  } else {
    char t = sp.type == 0 ? 'g' : sp.type;
    double x = std::fabs(v);
    if (t == '%') {
      x *= 100;
      t = 'f';
    }
    const int prec = sp.precision >= 0 ? sp.precision : 6;
    char fmt[16];
    std::snprintf(fmt, sizeof fmt, "%%.%d%c", prec, t);
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, x);
    body = buf;
    if (sp.comma && (t == 'f' || t == 'F')) {
      const auto dot = body.find('.');
      body = group_thousands(body.substr(0, dot)) + (dot == std::string::npos ? "" : body.substr(dot));
    }
    if (sp.type == '%') body += '%';
  }
  std::string sign = neg ? "-" : (sp.sign == '+' ? "+" : (sp.sign == ' ' ? " " : ""));
  const std::size_t len = sign.size() + body.size();
  if (static_cast<std::size_t>(sp.width) <= len) return sign + body;
  const std::size_t pad = static_cast<std::size_t>(sp.width) - len;
  char align = sp.align;
  char fill = sp.fill;
  if (align == 0 && sp.zero) {
    align = '=';
    fill = '0';
  }
  if (align == 0) align = '>';
  switch (align) {
    case '<': return sign + body + std::string(pad, fill);
    case '^': return std::string(pad / 2, fill) + sign + body + std::string(pad - pad / 2, fill);
    case '=': return sign + std::string(pad, fill) + body;
    default: return std::string(pad, fill) + sign + body;
  }
}
}  // namespace

std::string format_filepath(const std::string& templ, const std::map<std::string, std::int64_t>& ints,
                            const Logs& logs) {
  std::string out;
  for (std::size_t i = 0; i < templ.size(); ++i) {
    const char c = templ[i];
    if (c == '}') {
      LOCKSTEP_CHECK(i + 1 < templ.size() && templ[i + 1] == '}', "filepath template '", templ,
                     "': single '}' (write '}}' for a literal brace)");
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < templ.size() && templ[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const std::size_t close = templ.find('}', i);
    LOCKSTEP_CHECK(close != std::string::npos, "filepath template '", templ, "': '{' is never closed");
    const std::string field = templ.substr(i + 1, close - i - 1);
    const std::size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const Spec spec = parse_spec(colon == std::string::npos ? "" : field.substr(colon + 1), templ);
    if (const auto it = ints.find(name); it != ints.end()) {
      out += render(spec, true, it->second, 0, name, templ);
    } else if (const auto jt = logs.find(name); jt != logs.end()) {
      out += render(spec, false, 0, jt->second, name, templ);
    } else {
      std::string keys;
      for (const auto& [k, v] : ints) keys += (keys.empty() ? "" : ", ") + k;
      for (const auto& [k, v] : logs) keys += (keys.empty() ? "" : ", ") + k;
      throw ValueError("filepath template '" + templ + "' names '" + name +
                       "', which is not in the logs; available keys: " + keys);
    }
    i = close;
  }
  return out;
}

}  // namespace lockstep
