#include "distribute/phase_times.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "core/env.hpp"

namespace lockstep::distribute::phase_times {

namespace {
constexpr int kPhases = 5, kLoopPhases = 4;
constexpr std::int64_t kWarmupSteps = 10;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One per thread that ran a step; never freed (printed at exit, after the threads are gone).
struct Slot {
  int replica = -1;
  std::int64_t steps = 0;                  // steps started on this thread
  std::array<double, kPhases> seconds{};   // after the warm-up
  double waits = 0;                        // every exchange wait, warm-up included (for Scope)
  double last_end = -1;                    // end of the thread's last phase
};
// One per thread that ran a training loop (LoopScope), likewise.
struct LoopSlot {
  std::int64_t steps = 0;
  std::array<double, kLoopPhases> seconds{};  // after the warm-up
};

std::mutex mu;
template <class S>
std::vector<S*>& listed() {  // every thread's S, for the report
  static auto* s = new std::vector<S*>;
  return *s;
}

// "lockstep: phase times, WHO, ms per step over N steps: NAME MS ... (total MS)"
template <std::size_t P>
void print_line(const char* who, std::int64_t steps, const std::array<double, P>& seconds, const char* const* names) {
  const std::int64_t n = steps - kWarmupSteps;
  if (n <= 0) return;
  double total = 0;
  for (double v : seconds) total += v;
  std::fprintf(stderr, "lockstep: phase times, %s, ms per step over %lld steps:", who, static_cast<long long>(n));
  for (std::size_t p = 0; p < P; ++p) std::fprintf(stderr, " %s %.3f", names[p], 1e3 * seconds[p] / n);
  std::fprintf(stderr, " (total %.3f)\n", 1e3 * total / n);
}

void report() {
  std::lock_guard<std::mutex> lock(mu);
  const char* names[kPhases] = {"input", "forward", "backward", "exchange wait", "update"};
  for (const Slot* s : listed<Slot>()) {
    char who[32];
    std::snprintf(who, sizeof who, "%s %d", s->replica >= 0 ? "replica" : "device", s->replica >= 0 ? s->replica : 0);
    print_line(who, s->steps, s->seconds, names);
  }
  const char* loop_names[kLoopPhases] = {"input wait", "step", "read", "callbacks"};
  for (const LoopSlot* s : listed<LoopSlot>()) print_line("fit loop", s->steps, s->seconds, loop_names);
}

// Called with `mu` held, by the first thread that times anything.
void report_at_exit() {
  static const bool registered = (std::atexit(report), true);
  (void)registered;
}

// The calling thread's S (Slot, LoopSlot), made and listed on its first use.
template <class S>
S& mine() {
  thread_local S* slot = [] {
    auto* s = new S;
    std::lock_guard<std::mutex> lock(mu);
    report_at_exit();
    listed<S>().push_back(s);
    return s;
  }();
  return *slot;
}

void add(Slot& s, Phase phase, double seconds) {
  if (s.steps > kWarmupSteps) s.seconds[static_cast<int>(phase)] += seconds;
}
}  // namespace

bool enabled() {
  static const bool on = env::flag("LOCKSTEP_PHASE_TIMES");
  return on;
}

Scope::Scope(Phase phase, int replica) : phase_(phase), on_(enabled()) {
  if (!on_) return;
  Slot& s = mine<Slot>();
  start_ = now();
  waits_at_start_ = s.waits;
  if (phase == Phase::kForward) {
    ++s.steps;
    if (replica >= 0) s.replica = replica;
    if (s.last_end >= 0) add(s, Phase::kInput, start_ - s.last_end);
  }
}

Scope::~Scope() {
  if (!on_) return;
  Slot& s = mine<Slot>();
  s.last_end = now();
  add(s, phase_, s.last_end - start_ - (s.waits - waits_at_start_));
}

LoopScope::LoopScope(LoopPhase phase) : phase_(phase), on_(enabled()) {
  if (!on_) return;
  if (phase == LoopPhase::kStep) ++mine<LoopSlot>().steps;
  start_ = now();
}

LoopScope::~LoopScope() {
  if (!on_) return;
  LoopSlot& s = mine<LoopSlot>();
  if (s.steps > kWarmupSteps) s.seconds[static_cast<int>(phase_)] += now() - start_;
}

WaitScope::WaitScope() : on_(enabled()) {
  if (on_) start_ = now();
}

WaitScope::~WaitScope() {
  if (!on_) return;
  Slot& s = mine<Slot>();
  const double t = now() - start_;
  s.waits += t;
  add(s, Phase::kExchangeWait, t);
}

}  // namespace lockstep::distribute::phase_times
