#pragma once
// One reader of a Keras class's config (optimizers, metrics, learning-rate schedules): the
// options a class takes are the ones it reads (no key list beside the reads to keep in step),
// Keras' null is an option left unset, and what no read took is refused by name unless it is
// Keras' "off" (null or false), so that no option is dropped silently. Every message names the
// class, the key and the value the same way: "optimizer Adam: argument amsgrad=true is not
// supported".
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lockstep::detail {

class ConfigReader {
 public:
  /// `what` names the class in messages ("optimizer Adam", "metric BinaryAccuracy"). ValueError
  /// where `config` is not an object.
  ConfigReader(std::string what, const nlohmann::json& config);

  /// config[key] where set (present, not null), else `otherwise`; the required forms throw
  /// "missing argument key" where it is unset. A value of the wrong type, or an integer outside
  /// [min, max], is a ValueError naming key and value.
  double number(const char* key, double otherwise);
  double number(const char* key);
  std::optional<double> optional_number(const char* key);
  std::int64_t integer(const char* key, std::int64_t otherwise, std::int64_t min = kLowest,
                       std::int64_t max = kHighest);
  std::int64_t integer(const char* key);
  bool boolean(const char* key, bool otherwise);
  std::string string(const char* key, const std::string& otherwise);
  std::vector<double> numbers(const char* key);
  std::vector<std::int64_t> integers(const char* key);
  /// The value itself where set, else null (a read all the same), for an option of several forms.
  const nlohmann::json* raw(const char* key);

  /// Marks keys as read that another reader owns (Keras' name where the class does not keep it).
  void pass_over(std::initializer_list<const char*> keys);
  /// Reads `key` only to refuse it unless off, saying what to do instead (`hint`).
  void refuse(const char* key, const char* hint);
  /// ValueError naming the first key no read took whose value is not Keras' "off" (null or false).
  void refuse_the_rest() const;

  /// "<what>: argument key=value <problem>", the one form of a refusal.
  [[noreturn]] void fail(const char* key, const nlohmann::json& value, const std::string& problem) const;

 private:
  static constexpr std::int64_t kLowest = std::numeric_limits<std::int64_t>::lowest();
  static constexpr std::int64_t kHighest = std::numeric_limits<std::int64_t>::max();
  const nlohmann::json& required(const char* key);

  std::string what_;
  const nlohmann::json& config_;
  std::set<std::string> read_;
};

}  // namespace lockstep::detail
