#pragma once
// The one table of environment variables lockstep knows, and the only place that reads the
// environment (a `getenv` anywhere else is a review error). Rows say who reads each variable:
// the library, the test build of the CLI, the repository's scripts, or a launcher (HOME, MPI).
// Scripts' and tests' rows are here so that a typo check can tell them from a misspelt switch.
//
// The environment is checked once, at the first read of any row (in practice at library
// start-up, and first thing in the CLI): a LOCKSTEP_* variable the table does not know, or a
// malformed value, is a ValueError naming it, and every later read throws the same error (for a
// removed A/B switch, it names the options field that replaced it). Values are read once then,
// except rows marked `each_use`, which tests change inside one process.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::env {

enum class Type { kFlag, kInteger, kEnum, kPath, kText };
enum class Reader { kLibrary, kTestBuild, kScripts, kLauncher };

struct Row {
  std::string_view name;
  Type type;
  std::string_view fallback;   // the default, as a value of the row; "" when there is none
  std::string_view overrides;  // the options field or flag it overrides, if any
  std::string_view doc;        // one line
  std::string_view accepted;   // enum: "a|b|c"; integer: what the number is ("a device count")
  std::int64_t min = 0, max = 0;  // integer rows
  bool each_use = false;
  Reader reader = Reader::kLibrary;
};

/// Every row, in the order `lockstep env` prints them.
std::span<const Row> table();
/// Checks the whole environment: what the first read checks (once per process; later reads
/// rethrow its error) and the `each_use` rows' values as they are now. Throws ValueError.
void check();
/// The first problem in `entries` ("NAME=value", as in `environ`): an unknown LOCKSTEP_* name
/// (with the closest known one, or the options field that replaced a removed switch) or a
/// malformed value; "" when there is none.
std::string first_problem(const std::vector<std::string>& entries);

/// Typed reads; the name must be a row of the right type (else InternalError).
bool flag(std::string_view name);
/// Unset and without a default: nullopt (the caller's own default applies).
std::optional<std::int64_t> integer(std::string_view name);
/// Enum, path and text rows: the value, or the default ("" when none).
std::string text(std::string_view name);
/// Whether the variable is set (non-empty), e.g. MPI launchers' variables.
bool is_set(std::string_view name);

/// What a user sees: name, type, default, current value, what it overrides and the line of
/// documentation, one block per row (the `lockstep env` command; the docs quote it).
std::string describe();
/// The row name closest to `name` by edit distance (for "did you mean").
std::string_view closest_name(std::string_view name);

}  // namespace lockstep::env
