#include "nn/config_reader.hpp"

#include <cmath>
#include <limits>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

using nlohmann::json;

ConfigReader::ConfigReader(std::string what, const json& config, Null null)
    : what_(std::move(what)), config_(config), null_(null) {
  LOCKSTEP_CHECK(config_.is_object(), what_, ": config ", config_.dump().substr(0, 120), " is not an object");
}

const json* ConfigReader::raw(const char* key) {
  read_.insert(key);
  const auto it = config_.find(key);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
}

const json* ConfigReader::typed(const char* key) {
  read_.insert(key);
  const auto it = config_.find(key);
  if (it == config_.end() || (it->is_null() && null_ == Null::kUnset)) return nullptr;
  return &*it;
}

const json& ConfigReader::required(const char* key) {
  const json* v = typed(key);
  LOCKSTEP_CHECK(v != nullptr, what_, ": missing argument ", key);
  return *v;
}

const json& ConfigReader::value(const char* key) {
  read_.insert(key);
  const auto it = config_.find(key);
  LOCKSTEP_CHECK(it != config_.end(), what_, ": missing argument ", key);
  return *it;
}

void ConfigReader::fail(const char* key, const json& value, const std::string& problem) const {
  throw ValueError(concat(what_, ": argument ", key, "=", value.dump().substr(0, 120), " ", problem));
}

namespace {
// A JSON number that is finite (a C++ caller may put a NaN in a config; JSON text has none).
bool finite_number(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }
}  // namespace

double ConfigReader::number(const char* key) {
  const json& v = required(key);
  if (!finite_number(v)) fail(key, v, "must be a finite number");
  return v.get<double>();
}

double ConfigReader::number(const char* key, double otherwise) { return typed(key) ? number(key) : otherwise; }

std::optional<double> ConfigReader::optional_number(const char* key) {
  return typed(key) ? std::optional<double>(number(key)) : std::nullopt;
}

float ConfigReader::real(const char* key) {
  const double d = number(key);
  if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    fail(key, config_.at(key), "is past float32's range");
  return static_cast<float>(d);
}

float ConfigReader::real(const char* key, float otherwise) { return typed(key) ? real(key) : otherwise; }

std::int64_t ConfigReader::integer(const char* key, std::int64_t otherwise, std::int64_t min,
                                   std::int64_t max) {
  const json* v = typed(key);
  if (!v) return otherwise;
  const std::string wanted = min == kLowest && max == kHighest ? "must be an integer"
                             : max == kHighest                 ? concat("must be an integer >= ", min)
                                               : concat("must be an integer in [", min, ", ", max, "]");
  // nlohmann's get<std::int64_t>() would truncate 2.5, and true is no integer in Keras either.
  const bool past_int64 =
      v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(kHighest);
  if (!v->is_number_integer() || past_int64) fail(key, *v, wanted);
  const auto i = v->get<std::int64_t>();
  if (i < min || i > max) fail(key, *v, wanted);
  return i;
}

std::int64_t ConfigReader::integer(const char* key) {
  (void)required(key);
  return integer(key, 0);
}

std::int64_t ConfigReader::integer_in(const char* key, std::int64_t min, std::int64_t max) {
  (void)required(key);
  return integer(key, 0, min, max);
}

bool ConfigReader::boolean(const char* key, bool otherwise) {
  const json* v = typed(key);
  if (!v) return otherwise;
  if (!v->is_boolean()) fail(key, *v, "must be true or false");
  return v->get<bool>();
}

bool ConfigReader::boolean(const char* key) {
  (void)required(key);
  return boolean(key, false);
}

std::string ConfigReader::string(const char* key, const std::string& otherwise) {
  const json* v = typed(key);
  if (!v) return otherwise;
  if (!v->is_string()) fail(key, *v, "must be a string");
  return v->get<std::string>();
}

std::string ConfigReader::string(const char* key) {
  (void)required(key);
  return string(key, std::string());
}

std::vector<double> ConfigReader::numbers(const char* key) {
  const json& v = required(key);
  std::vector<double> out;
  if (!v.is_array()) fail(key, v, "must be a list of numbers");
  for (const json& e : v) {
    if (!finite_number(e)) fail(key, v, "must be a list of numbers");
    out.push_back(e.get<double>());
  }
  return out;
}

std::vector<float> ConfigReader::reals(const char* key) {
  std::vector<float> out;
  for (double d : numbers(key)) {
    if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
      fail(key, config_.at(key), "is past float32's range");
    out.push_back(static_cast<float>(d));
  }
  return out;
}

std::vector<std::int64_t> ConfigReader::integers(const char* key, std::int64_t min, std::int64_t max) {
  const json& v = required(key);
  const std::string wanted = min == kLowest && max == kHighest ? "must be a list of integers"
                             : concat("must be a list of integers in [", min, ", ", max, "]");
  std::vector<std::int64_t> out;
  if (!v.is_array()) fail(key, v, wanted);
  for (const json& e : v) {
    const bool past_int64 =
        e.is_number_unsigned() && e.get<std::uint64_t>() > static_cast<std::uint64_t>(kHighest);
    if (!e.is_number_integer() || past_int64 || e.get<std::int64_t>() < min || e.get<std::int64_t>() > max)
      fail(key, v, wanted);
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::vector<std::int64_t> ConfigReader::dimensions(const char* key) {
  const json& v = required(key);
  std::vector<std::int64_t> out;
  if (!v.is_array()) fail(key, v, "must be a list of integers or None");
  for (const json& e : v) {
    if (!e.is_null() && !e.is_number_integer()) fail(key, v, "must be a list of integers or None");
    out.push_back(e.is_null() ? -1 : e.get<std::int64_t>());
  }
  return out;
}

void ConfigReader::pass_over(std::initializer_list<const char*> keys) {
  for (const char* key : keys) read_.insert(key);
}

void ConfigReader::refuse(const char* key, const char* hint) {
  if (const json* v = raw(key); v && *v != json(false))
    fail(key, *v, concat("is not supported (", hint, ")"));
}

void ConfigReader::refuse_the_rest() const {
  for (const auto& [key, value] : config_.items()) {
    if (read_.contains(key) || value.is_null() || value == json(false)) continue;
    fail(key.c_str(), value, "is not supported");
  }
}

}  // namespace lockstep::detail
