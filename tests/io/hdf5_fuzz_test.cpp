// Byte stamps over the header region of a Keras-like weights file (issue 41, item 2 and
// acceptance 2): libhdf5 1.10 crashed on 13 of the 512 stamps of eight 0xff bytes over the first
// 2 KiB; every stamp must now end in an IOError naming the file or in a load, never a signal.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "io/hdf5_child_probe.hpp"
#include "io_test_util.hpp"
#include "lockstep/io/hdf5_file.hpp"

namespace lockstep::io {
namespace {

using Clock = std::chrono::steady_clock;

// Sanitizer builds run the same loads several times slower (and report libhdf5's crashes in the
// checking children before those exit).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// What Keras writes for a small MLP: two dense layers' variables, the optimizer's, empty groups.
std::string weights_file() {
  H5Content c;
  for (const char* layer : {"dense", "dense_1"}) c.groups.push_back({std::string("layers/") + layer + "/vars", {}});
  c.groups.push_back({"vars", {}});
  c.datasets.push_back({"layers/dense/vars/0", Tensor::ones(Shape{784, 128})});
  c.datasets.push_back({"layers/dense/vars/1", Tensor::ones(Shape{128})});
  c.datasets.push_back({"layers/dense_1/vars/0", Tensor::ones(Shape{128, 10})});
  c.datasets.push_back({"layers/dense_1/vars/1", Tensor::ones(Shape{10})});
  for (int i = 0; i < 6; ++i)
    c.datasets.push_back({"optimizer/vars/" + std::to_string(i), Tensor::ones(Shape{i % 2 == 0 ? 128 : 10})});
  return encode_hdf5(c);
}

struct Outcomes {
  int loads = 0;
  int errors = 0;
  int crashes_caught = 0;  // errors saying libhdf5 crashed (in the checking child)
};

// Eight bytes at every `stride`-th offset below `span`, each from `fill(offset)`: a byte value,
// or -1 for random bytes.
template <typename Fill>
Outcomes stamp_and_load(const std::string& good, Fill fill, std::size_t span, std::size_t stride) {
  std::mt19937 rng(41);
  Outcomes out;
  for (std::size_t at = 0; at < span; at += stride) {
    std::string b = good;
    const int value = fill(at);
    for (std::size_t k = at; k < std::min(b.size(), at + 8); ++k)
      b[k] = static_cast<char>(value >= 0 ? value : static_cast<int>(rng() & 0xff));
    try {
      (void)decode_hdf5(b, "fuzz.h5");
      ++out.loads;
    } catch (const IOError& e) {
      ++out.errors;
      if (std::string(e.what()).find("libhdf5 crashed") != std::string::npos) ++out.crashes_caught;
      EXPECT_EQ(std::string(e.what()).rfind("fuzz.h5: ", 0), 0u) << "at " << at << ": " << e.what();
    }
  }
  return out;
}

TEST(Hdf5Fuzz, HeaderStampsEndInAnErrorOrALoadNeverASignal) {
  const std::string good = weights_file();
  const auto t0 = Clock::now();
  const Outcomes ones = stamp_and_load(good, [](std::size_t) { return 0xff; }, 2048, 4);  // the 512
  // Every byte again under zeros or random bytes, alternately (each load forks a checking child,
  // ~20-50 ms on two busy cores: the test stays within a minute).
  const Outcomes others = stamp_and_load(good, [](std::size_t at) { return at % 16 == 0 ? 0x00 : -1; }, 2048, 8);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(ones.loads + ones.errors, 512);
  EXPECT_GT(ones.errors, 100) << "most stamps over the metadata are noticed";
  EXPECT_GT(others.errors, 50);
  EXPECT_LT(seconds, kSanitized ? 180 : 60) << "in CI on two cores";
  std::printf("errors (of which libhdf5 crashes caught), loads: 0xff %d (%d), %d; 0x00/random %d (%d), %d; %.1f s\n",
              ones.errors, ones.crashes_caught, ones.loads, others.errors, others.crashes_caught, others.loads, seconds);
}

TEST(Hdf5ChildProbe, ACrashAStallOrAnErrorInTheChildIsAnIOErrorHere) {
  using std::chrono::seconds;
  h5::probe_in_child([] {}, "ok.h5", seconds(5));
  // (The default action: under AddressSanitizer its own handler would report and exit instead.)
  expect_io_error([] { h5::probe_in_child([] { ::signal(SIGSEGV, SIG_DFL), ::raise(SIGSEGV); }, "crash.h5", seconds(5)); },
                  {"crash.h5", "crashed", "signal 11"});
  const auto t0 = Clock::now();
  expect_io_error([] { h5::probe_in_child([] { ::sleep(30); }, "stall.h5", seconds(1)); },
                  {"stall.h5", "longer than 1 s"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5) << "the stalled child is killed";
  expect_io_error([] { h5::probe_in_child([] { throw IOError("bad.h5: its own problem"); }, "bad.h5", seconds(5)); },
                  {"bad.h5: its own problem"});
}

}  // namespace
}  // namespace lockstep::io
