// Asking for more replicas than a machine can run: a clear error, never std::terminate.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {
// Bytes of address space this process maps now (VmSize).
long long mapped_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long long kb = 0;
  while (f >> key) {
    if (key == "VmSize:") {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 12, '\n');
  }
  return -1;
}

// The sanitizers' shadow memory needs all the address space: no RLIMIT_AS under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Runs in a death-test child: exits 0 when the strategy reports the threads it could not start.
[[noreturn]] void start_1000_replicas_in_little_address_space() {
  // 1 GiB more than now; 1000 replica stacks of 8 MiB need 8.
  const auto limit = static_cast<rlim_t>(mapped_bytes() + (1LL << 30));
  const rlimit rl{limit, limit};
  if (::setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(3);
  try {
    MirroredStrategy s({.num_cpu_devices = 1000, .pin_threads = false});
  } catch (const DistributedError& e) {
    const std::string m = e.what();
    std::_Exit(m.find("1000 replicas asked for") != std::string::npos &&
                       m.find("cannot start the thread of replica") != std::string::npos
                   ? 0
                   : 5);
  }
  std::_Exit(4);  // every thread started: the limit did not bite
}
}  // namespace

// One bound for every way of asking for logical CPU devices.
TEST(ThreadLimits, CpuDeviceCountIsBoundedTheSameWayEverywhere) {
  auto m = test::message_of([] { MirroredStrategy s({.num_cpu_devices = kMaxCpuDevices + 1}); });
  EXPECT_NE(m.find("1025 logical CPU devices asked for; the count must be in [1, 1024]"), std::string::npos) << m;
  m = test::message_of([] { MirroredStrategy s({.num_cpu_devices = -2}); });
  EXPECT_NE(m.find("-2 logical CPU devices"), std::string::npos) << m;
  ::setenv("LOCKSTEP_CPU_DEVICES", "40000", 1);
  m = test::message_of([] { MirroredStrategy s; });
  ::unsetenv("LOCKSTEP_CPU_DEVICES");
  EXPECT_NE(m.find("LOCKSTEP_CPU_DEVICES='40000' is not a device count in [1, 1024]"), std::string::npos) << m;
}

// Replica threads that cannot be created (address space for their stacks runs out): the ones
// already started are joined and DistributedError says how many were asked for and started.
TEST(ThreadLimits, ReplicaThreadsThatCannotStartAreReportedAndJoined) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS cannot be lowered under a sanitizer";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_1000_replicas_in_little_address_space(), ::testing::ExitedWithCode(0), "");
}
