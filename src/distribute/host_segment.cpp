#include "distribute/host_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include "distribute/cpu_pause.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::distribute {

namespace {
using Clock = std::chrono::steady_clock;
using Bytes = WorkerTransport::Bytes;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "arrival counters must work across processes");

constexpr std::size_t kPage = 4096;
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::string list(const std::vector<int>& workers) {
  std::ostringstream os;
  for (std::size_t i = 0; i < workers.size(); ++i) os << (i ? ", " : "") << workers[i];
  return os.str();
}

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// Every worker learns whether every worker succeeded, and what each said (its error, or for
// worker 0 after creating the segment, its name): one status byte and some text each.
bool all_ok(WorkerTransport& transport, int tag, bool ok, const std::string& text, const Deadline& deadline,
            std::string* why, std::string* chief_text = nullptr) {
  constexpr std::size_t kText = 200;
  Bytes mine(1 + kText, std::byte{0});
  mine[0] = std::byte{ok ? std::uint8_t{1} : std::uint8_t{0}};
  std::memcpy(mine.data() + 1, text.data(), std::min(text.size(), kText - 1));
  const std::vector<Bytes> all =
      transport.all_to_all(tag, mine, deadline.at, deadline.after, "the shared-memory segment's set-up");
  const auto text_of = [](const Bytes& b) { return std::string(reinterpret_cast<const char*>(b.data() + 1)); };
  if (chief_text) *chief_text = text_of(all[0]);
  for (std::size_t j = 0; j < all.size(); ++j) {
    if (all[j][0] == std::byte{1}) continue;
    if (why && why->empty()) *why = "worker " + std::to_string(j) + ": " + text_of(all[j]);
    ok = false;
  }
  return ok;
}
}  // namespace

std::unique_ptr<HostSegment> HostSegment::open(WorkerTransport& transport, int tag, std::size_t slot_bytes,
                                               const std::vector<std::int32_t>& pids, const Deadline& deadline,
                                               std::string* why) {
  const int worker = transport.rank(), workers = transport.size();
  slot_bytes = round_up(slot_bytes, kPage);
  const std::size_t control = round_up(sizeof(Line) * static_cast<std::size_t>(workers), kPage);
  const std::size_t bytes = control + 2 * static_cast<std::size_t>(workers) * slot_bytes;
  // 1. Worker 0 creates it under a fresh name (its pid, the group's tag and a random part, so
  //    that no other job's segment is ever opened or removed), with its pages reserved up front:
  //    a full /dev/shm is an error here (ENOSPC), not a SIGBUS at the first collective.
  std::string error, name;
  if (worker == 0) {
    std::random_device entropy;
    int fd = -1;
    for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
      char id[80];
      std::snprintf(id, sizeof id, "/lockstep-%d-%d-%08x%08x", static_cast<int>(pids[0]), tag, entropy(), entropy());
      name = id;
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
    struct statvfs fs{};
    if (fd < 0) {
      error = errno_text("shm_open");
    } else if (fstatvfs(fd, &fs) == 0 && fs.f_bavail * fs.f_frsize < bytes) {
      // Checked first: tmpfs would fill the memory it has before posix_fallocate failed.
      error = "the segment needs " + std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB and /dev/shm has " +
              std::to_string((fs.f_bavail * fs.f_frsize) >> 20) + " MiB free";
    } else {
      const int rc = ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno
                                                                    : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (rc != 0) error = std::string("reserving ") + std::to_string(bytes >> 20) + " MiB in /dev/shm: " + std::strerror(rc);
    }
    if (fd >= 0) {
      close(fd);
      if (!error.empty()) shm_unlink(name.c_str());
    }
  }
  if (!all_ok(transport, tag, error.empty(), worker == 0 && error.empty() ? name : error, deadline, why, &name)) {
    if (worker == 0 && error.empty()) shm_unlink(name.c_str());
    return nullptr;
  }

  // 2. Everyone maps it; worker 0 initializes the control lines before the next exchange.
  void* base = MAP_FAILED;
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    error = errno_text("shm_open");
  } else {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno_text("mmap");
    close(fd);
  }
  if (worker == 0 && base != MAP_FAILED)
    for (int j = 0; j < workers; ++j) new (static_cast<std::byte*>(base) + sizeof(Line) * static_cast<std::size_t>(j)) Line;
  const bool mapped = all_ok(transport, tag, error.empty(), error, deadline, why);
  if (worker == 0) shm_unlink(name.c_str());  // every worker mapped it (or gave up): it lives as long as they do
  if (!mapped) {
    if (base != MAP_FAILED) munmap(base, bytes);
    return nullptr;
  }
  // A peer's process can be watched only when this worker sees it (the same pid namespace).
  std::vector<std::int32_t> watched = pids;
  for (std::int32_t pid : pids)
    if (kill(pid, 0) != 0 && errno == ESRCH) watched.clear();
  return std::unique_ptr<HostSegment>(
      new HostSegment(transport, base, bytes, slot_bytes, worker, workers, std::move(watched)));
}

HostSegment::HostSegment(WorkerTransport& transport, void* base, std::size_t bytes, std::size_t slot_bytes, int worker,
                         int workers, std::vector<std::int32_t> pids)
    : transport_(transport),
      base_(base),
      bytes_(bytes),
      slot_bytes_(slot_bytes),
      data_(static_cast<std::byte*>(base) + round_up(sizeof(Line) * static_cast<std::size_t>(workers), kPage)),
      worker_(worker),
      workers_(workers),
      pids_(std::move(pids)) {}

HostSegment::~HostSegment() { munmap(base_, bytes_); }

HostSegment::Line& HostSegment::line(int worker) const {
  return *std::launder(reinterpret_cast<Line*>(static_cast<std::byte*>(base_) + sizeof(Line) * static_cast<std::size_t>(worker)));
}

Tensor HostSegment::slot(int set, int worker, std::int64_t numel, DType dtype) const {
  const std::size_t n = static_cast<std::size_t>(numel) * dtype_size(dtype);
  LOCKSTEP_CHECK(n <= slot_bytes_, "HostSegment::slot: ", n, " bytes do not fit a slot of ", slot_bytes_);
  std::byte* at = data_ + (static_cast<std::size_t>(set) * static_cast<std::size_t>(workers_) +
                           static_cast<std::size_t>(worker)) * slot_bytes_;
  return Tensor::wrap(at, {numel}, dtype);
}

HostSegment::Header& HostSegment::header(int set, int worker) { return line(worker).headers[set]; }

std::vector<int> HostSegment::missing(std::uint64_t target) const {
  std::vector<int> out;
  for (int j = 0; j < workers_; ++j)
    if (line(j).arrivals.load(std::memory_order_acquire) < target) out.push_back(j);
  return out;
}

std::vector<int> HostSegment::gone(const std::vector<int>& workers) const {
  std::vector<int> out;
  if (pids_.empty()) return out;
  for (int j : workers)
    if (kill(pids_[static_cast<std::size_t>(j)], 0) != 0 && errno == ESRCH) out.push_back(j);
  return out;
}

std::string HostSegment::waiting_for() const {
  std::lock_guard<std::mutex> lock(waiting_mu_);
  return waiting_for_;
}

void HostSegment::arrive_and_wait(const Deadline& deadline, const std::function<std::string()>& describe) {
  if (!failure_.empty())
    throw DistributedError(describe() + " failed: the workers' shared memory failed earlier: " + failure_);
  const std::uint64_t target = ++arrivals_;
  line(worker_).arrivals.store(target, std::memory_order_release);
  // Peers on other cores arrive within microseconds: spin first, then yield the core (an
  // oversubscribed machine needs it for the peer), then sleep a little (a peer that stalls, or
  // writes a checkpoint for seconds, should not cost a core).
  const auto start = Clock::now();
  auto last_check = start;
  for (unsigned spins = 0;; ++spins) {
    bool all = true;
    for (int j = 0; j < workers_ && all; ++j) all = line(j).arrivals.load(std::memory_order_acquire) >= target;
    if (all) break;
    if (spins < 256) {
      cpu_pause();
      continue;
    }
    const auto now = Clock::now();
    if (now - last_check >= std::chrono::milliseconds(50)) {
      last_check = now;
      const std::string what = describe();
      const std::vector<int> late = missing(target);
      {
        std::lock_guard<std::mutex> lock(waiting_mu_);
        waiting_for_ = "worker(s) " + list(late) + " in " + what;
      }
      std::ostringstream os;
      if (const std::string notice = transport_.peer_failure(); !notice.empty()) {
        os << notice << " (this worker, " << worker_ << ", stopped in " << what << ")";
      } else if (const std::vector<int> dead = gone(late); !dead.empty()) {
        os << what << " failed on worker " << worker_ << ": worker(s) " << list(dead) << " died (process";
        for (int j : dead) os << ' ' << pids_[static_cast<std::size_t>(j)];
        os << " is gone)";
      } else if (now >= deadline.at) {
        os << what << " timed out after " << deadline.after.count() << " ms on worker " << worker_ << ": worker(s) "
           << list(late) << " never sent their part (the process died, stalled, or stopped calling collectives)";
      }
      if (!os.str().empty()) {
        failure_ = os.str();
        throw DistributedError(failure_);
      }
    }
    if (now - start < std::chrono::milliseconds(2)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::lock_guard<std::mutex> lock(waiting_mu_);
  waiting_for_.clear();
}

}  // namespace lockstep::distribute
