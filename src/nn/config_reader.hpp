#pragma once
// One reader of a class's config (layers, optimizers, metrics, losses, learning-rate schedules):
// the options a class takes are the ones it reads (no key list beside the reads to keep in step),
// and every value of the wrong type or range is refused naming the class, the key and the value
// the same way: "optimizer Adam: argument amsgrad=true is not supported", "Dense: argument
// units="64" must be an integer". Optimizers, metrics, losses and schedules read Keras' null as an
// option left unset, and what no read took is refused by name unless it is Keras' "off" (null or
// false), so that no option is dropped silently. Layers read null as a value of its own (Keras'
// None, which means something of its own to a layer): the typed reads refuse it, raw() returns it
// as unset; the layer registry checks the keys a layer takes (keras_config).
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
  /// Keras' null in a config: an option left unset (kUnset), or a value the typed reads refuse (kValue).
  enum class Null { kUnset, kValue };

  /// `what` names the class in messages ("optimizer Adam", "metric BinaryAccuracy", "Dense").
  /// ValueError where `config` is not an object.
  ConfigReader(std::string what, const nlohmann::json& config, Null null = Null::kUnset);

  /// config[key] where set (present, not null), else `otherwise`; the required forms throw
  /// "missing argument key" where it is unset. A value of the wrong type, or an integer outside
  /// [min, max], is a ValueError naming key and value.
  double number(const char* key, double otherwise);
  double number(const char* key);
  std::optional<double> optional_number(const char* key);
  std::int64_t integer(const char* key, std::int64_t otherwise, std::int64_t min = kLowest,
                       std::int64_t max = kHighest);
  std::int64_t integer(const char* key);
  /// An integer in [min, max] that must be set.
  std::int64_t integer_in(const char* key, std::int64_t min, std::int64_t max);
  /// number() as a float: a finite value past float's range is refused, not made infinite.
  float real(const char* key, float otherwise);
  float real(const char* key);
  bool boolean(const char* key, bool otherwise);
  bool boolean(const char* key);
  std::string string(const char* key, const std::string& otherwise);
  std::string string(const char* key);
  std::vector<double> numbers(const char* key);
  /// numbers() as floats, each within float's range.
  std::vector<float> reals(const char* key);
  std::vector<std::int64_t> integers(const char* key, std::int64_t min = kLowest, std::int64_t max = kHighest);
  /// A shape: a list of integers, Keras' None (null) a dimension of any size (-1); the layer checks the sizes.
  std::vector<std::int64_t> dimensions(const char* key);
  /// The value itself where set (present, not null), else null (a read all the same), for an
  /// option of several forms or one whose null means something.
  const nlohmann::json* raw(const char* key);
  /// The value itself, null included, or "missing argument key" where absent.
  const nlohmann::json& value(const char* key);

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
  // The value where a typed read takes it (present; and not null where null is unset), else null.
  const nlohmann::json* typed(const char* key);

  std::string what_;
  const nlohmann::json& config_;
  Null null_;
  std::set<std::string> read_;
};

}  // namespace lockstep::detail

namespace lockstep::layers {
using ConfigReader = ::lockstep::detail::ConfigReader;

/// A layer's config reader, `cls` its class name: null is a value the typed reads refuse.
inline ConfigReader layer_config_reader(std::string cls, const nlohmann::json& config) {
  return ConfigReader(std::move(cls), config, ConfigReader::Null::kValue);
}
}  // namespace lockstep::layers
