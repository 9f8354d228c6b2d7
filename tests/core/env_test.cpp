// The table of environment variables (src/core/env.cpp). What the process environment holds is
// read once, so the malformed and unknown cases go through first_problem, which the first read
// applies to the real environment; the `each_use` rows are read afresh and can be set here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "core/env.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/distribute/strategy.hpp"

using namespace lockstep;

namespace {
const env::Row& row(std::string_view name) {
  for (const env::Row& r : env::table())
    if (r.name == name) return r;
  throw std::runtime_error("no row " + std::string(name));
}

// Sets a variable for one scope (only `each_use` rows are read again after the first read).
struct SetEnv {
  const char* name;
  SetEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~SetEnv() { ::unsetenv(name); }
};
}  // namespace

TEST(Env, EveryValueOfEveryTypeParses) {
  EXPECT_EQ(env::first_problem({"LOCKSTEP_WORKER_SHM=0", "LOCKSTEP_VERBOSE_RESUME=true", "LOCKSTEP_CUDA_TF32=ON",
                                "LOCKSTEP_VERBOSE_RESUME=no", "LOCKSTEP_CPU_THREADS=3", "LOCKSTEP_EMULATED_GPUS=0",
                                "LOCKSTEP_WORKER_SHM_SLOT_MIB=65536", "LOCKSTEP_BF16_GEMM=widen",
                                "LOCKSTEP_CONV_ALGORITHM=direct", "LOCKSTEP_DATA_DIR=/any/where",
                                "LOCKSTEP_PYPI=whatever", "PATH=/bin", "LOCKSTEP_DATA_DIR="}),
            "");
}

TEST(Env, MalformedValuesNameVariableValueAndWhatIsAccepted) {
  EXPECT_EQ(env::first_problem({"LOCKSTEP_WORKER_SHM=maybe"}),
            "LOCKSTEP_WORKER_SHM='maybe' is not a flag: use 1 or 0 (or true/false, yes/no, on/off)");
  EXPECT_EQ(env::first_problem({"LOCKSTEP_CPU_THREADS=-3"}),
            "LOCKSTEP_CPU_THREADS='-3' is not a thread count in [1, 65536]");
  EXPECT_EQ(env::first_problem({"LOCKSTEP_CPU_DEVICES=2x"}),
            "LOCKSTEP_CPU_DEVICES='2x' is not a device count in [1, 1024]");
  EXPECT_EQ(env::first_problem({"LOCKSTEP_EMULATED_GPUS=99999999999999999999"}),
            "LOCKSTEP_EMULATED_GPUS='99999999999999999999' is not a number of emulated GPUs in [0, 8]");
  EXPECT_EQ(env::first_problem({"LOCKSTEP_BF16_GEMM=fast"}),
            "LOCKSTEP_BF16_GEMM='fast' is not one of auto|widen|onednn");
}

TEST(Env, UnknownNameIsNamedWithTheClosestKnownOne) {
  EXPECT_EQ(env::first_problem({"LOCKSTEP_WORKER_SH=0"}),
            "unknown environment variable LOCKSTEP_WORKER_SH: did you mean LOCKSTEP_WORKER_SHM? "
            "(`lockstep env` lists the known ones)");
  // A typo is reported before a malformed value elsewhere: it is the likelier mistake.
  EXPECT_NE(env::first_problem({"LOCKSTEP_CPU_THREADS=x", "LOCKSTEP_CPU_THREAD=2"}).find("LOCKSTEP_CPU_THREADS?"),
            std::string::npos);
  EXPECT_EQ(env::closest_name("LOCKSTEP_CPU_DEVICE"), "LOCKSTEP_CPU_DEVICES");
  EXPECT_EQ(env::first_problem({"OTHER_SHARD_UPDAT=1"}), "");  // only lockstep's prefix is checked
}

TEST(Env, RemovedSwitchNamesTheOptionsFieldThatReplacedIt) {
  // The A/B and debug switches became options fields (issue 36); set, even to 1, they are errors.
  const std::pair<const char*, const char*> removed[] = {
      {"LOCKSTEP_GATHER_AHEAD", "FitOptions::gather_ahead"},
      {"LOCKSTEP_PREFETCH_TO_DEVICE", "FitOptions::prefetch_to_device"},
      {"LOCKSTEP_OVERLAP_GRADIENTS", "MirroredOptions::overlap_gradients"},
      {"LOCKSTEP_GRADIENTS_IN_PLACE", "MirroredOptions::gradients_in_place"},
      {"LOCKSTEP_SHARD_UPDATE", "MirroredOptions::shard_optimizer_update"},
      {"LOCKSTEP_CHECK_MIRRORED", "MirroredOptions::check_mirrored"},
  };
  for (const auto& [name, field] : removed) {
    EXPECT_EQ(env::first_problem({"PATH=/bin", std::string(name) + "=1"}),
              std::string("environment variable ") + name + " was removed: set " + field + " instead");
  }
  // The CLI's start-up check says the same (cli.removed_env_switch_names_its_field).
}

TEST(Env, DefaultsApplyWhenUnset) {
  // ctest runs the tests without these set; each_use rows are unset here explicitly.
  ::unsetenv("LOCKSTEP_CPU_DEVICES");
  EXPECT_FALSE(env::is_set("LOCKSTEP_CPU_DEVICES"));
  EXPECT_FALSE(env::integer("LOCKSTEP_CPU_DEVICES").has_value());  // no default: the strategy decides
  if (!std::getenv("LOCKSTEP_WORKER_SHM_SLOT_MIB")) {
    EXPECT_EQ(env::integer("LOCKSTEP_WORKER_SHM_SLOT_MIB").value_or(-1), 4);
  }
  if (!std::getenv("LOCKSTEP_BF16_GEMM")) {
    EXPECT_EQ(env::text("LOCKSTEP_BF16_GEMM"), "auto");
  }
  if (!std::getenv("LOCKSTEP_VERBOSE_RESUME")) {
    EXPECT_FALSE(env::flag("LOCKSTEP_VERBOSE_RESUME"));
  }
  if (!std::getenv("LOCKSTEP_WORKER_SHM")) {
    EXPECT_TRUE(env::flag("LOCKSTEP_WORKER_SHM"));
  }
}

TEST(Env, EachUseRowsAreReadAgainAndChecked) {
  {
    SetEnv n("LOCKSTEP_CPU_DEVICES", "3");
    EXPECT_EQ(env::integer("LOCKSTEP_CPU_DEVICES").value_or(-1), 3);
    EXPECT_TRUE(env::is_set("LOCKSTEP_CPU_DEVICES"));
  }
  EXPECT_FALSE(env::is_set("LOCKSTEP_CPU_DEVICES"));
  SetEnv bad("LOCKSTEP_CPU_DEVICES", "2x");
  try {
    (void)env::integer("LOCKSTEP_CPU_DEVICES");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_CPU_DEVICES='2x' is not a device count"), std::string::npos);
  }
  EXPECT_THROW(env::check(), ValueError);
}

TEST(Env, ReadingARowAsAnotherTypeOrAnUnknownRowIsALockstepBug) {
  EXPECT_THROW((void)env::flag("LOCKSTEP_CPU_THREADS"), InternalError);
  EXPECT_THROW((void)env::flag("LOCKSTEP_NO_SUCH_ROW"), InternalError);
}

TEST(Env, TableRowsAreConsistent) {
  EXPECT_EQ(row("LOCKSTEP_CPU_DEVICES").max, distribute::kMaxCpuDevices);
  for (const env::Row& r : env::table()) {
    EXPECT_FALSE(r.doc.empty()) << r.name;
    if (r.type == env::Type::kInteger) {
      EXPECT_LT(r.min, r.max) << r.name;
    }
    if (!r.fallback.empty()) {
      EXPECT_EQ(env::first_problem({std::string(r.name) + "=" + std::string(r.fallback)}), "") << r.name;
    }
  }
}

TEST(Env, DescribeListsEveryRowWithDefaultAndCurrentValue) {
  SetEnv on("LOCKSTEP_CPU_DEVICES", "3");
  const std::string text = env::describe();
  for (const env::Row& r : env::table()) EXPECT_NE(text.find(std::string(r.name) + "  ("), std::string::npos) << r.name;
  EXPECT_NE(text.find("LOCKSTEP_CPU_DEVICES  (integer in [1, 1024]; library; read at each use)\n"
                      "  default: (unset)   now: 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("overrides: MirroredOptions::num_cpu_devices when 0"), std::string::npos);
}
