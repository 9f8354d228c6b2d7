// WorkerTransport over MPI. One thread owns MPI's life: it initializes it (asking for
// MPI_THREAD_SERIALIZED) and finalizes or aborts it. Exchanges run on the calling thread, one
// at a time under a mutex: handing each one to the owner thread and back cost two thread
// wake-ups per exchange, which at the 3 exchanges of an all-reduce was most of the gap to
// MPI_Allreduce below a few MiB. An MPI that offers only MPI_THREAD_FUNNELED gets the hand-off:
// every call then runs on the owner thread.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "distribute/worker_transport.hpp"
#include "lockstep/core/error.hpp"
#include "core/thread_signals.hpp"

namespace lockstep::distribute {

bool built_with_mpi() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<std::size_t>(len));
}

class MpiTransport final : public WorkerTransport {
 public:
  MpiTransport() {
    thread_ = std::thread([this] {
      ::lockstep::detail::block_stop_signals_on_this_thread();
      loop();
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return started_; });
    if (!init_error_.empty()) {
      lock.unlock();
      thread_.join();
      throw DistributedError(init_error_);
    }
  }

  ~MpiTransport() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

  void abandon(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = why;
  }

  void announce_failure(const std::string& why) override {
    Job job{.raw = [&] { send_notice(why); }};
    submit(job, "announcing this worker's failure: ");
    abandon("this worker failed: " + why);
  }

  std::string peer_failure() override {
    if (!serialized_) return {};
    std::unique_lock<std::mutex> calls(call_mu_, std::try_to_lock);
    if (!calls.owns_lock()) return {};  // an exchange is in progress: it polls the notice itself
    return poll_notice();
  }

  std::string waiting_for() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_for_;
  }

  double time_raw_all_reduce(std::vector<float>& data, int iterations) override {
    double seconds = 0;
    std::string error;
    Job job{.raw = [&] {
      const int n = static_cast<int>(data.size());
      for (int i = 0; i < 2; ++i) MPI_Allreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) MPI_Allreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double mine = (MPI_Wtime() - t0) / iterations;
      MPI_Allreduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }};
    LOCKSTEP_CHECK(data.size() <= static_cast<std::size_t>(INT_MAX), "time_raw_all_reduce: too many elements");
    submit(job, "");
    return seconds;
  }

  void exchange(int tag, const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                Clock::time_point deadline, std::chrono::milliseconds timeout, const std::string& what) override {
    Job job{.tag = tag, .sends = &sends, .receives = &receives, .deadline = deadline, .timeout = timeout, .what = &what};
    submit(job, what + " failed: ");
    if (!job.error.empty()) throw DistributedError(job.error);
  }

 private:
  struct Job {
    int tag = 0;
    const std::vector<Transfer>* sends = nullptr;
    const std::vector<Transfer>* receives = nullptr;
    Clock::time_point deadline;
    std::chrono::milliseconds timeout{0};
    const std::string* what = nullptr;
    std::function<void()> raw;  // set: run this instead of transfers
    bool done = false;
    std::string error;
  };

  // Runs `job` on this thread when MPI allows calls from any thread (one at a time), else on
  // the owner thread. Throws DistributedError, `prefix` first, if the transport failed earlier.
  void submit(Job& job, const std::string& prefix) {
    if (serialized_) {
      std::lock_guard<std::mutex> calls(call_mu_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!failure_.empty()) throw DistributedError(prefix + "the job's MPI transport failed earlier: " + failure_);
      }
      execute(job);
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!failure_.empty()) throw DistributedError(prefix + "the job's MPI transport failed earlier: " + failure_);
    jobs_.push_back(&job);
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return job.done; });
  }

  void execute(Job& job) {
    if (job.raw) job.raw();
    else run(job);
    std::lock_guard<std::mutex> lock(mu_);
    job.done = true;
    waiting_for_.clear();
  }

  void loop() {
    int provided = 0;
    int rc = MPI_SUCCESS;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    else {
      owns_mpi_ = false;  // the program initialized MPI itself; it finalizes it too
      MPI_Query_thread(&provided);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rc != MPI_SUCCESS) {
        init_error_ = "MPI_Init_thread failed: " + mpi_error_string(rc);
      } else {
        // Errors are returned, so that a broken connection becomes an error naming the peer.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        serialized_ = provided >= MPI_THREAD_SERIALIZED;
        // Posted for the whole run: a failed peer's notice (announce_failure) lands here.
        if (size_ > 1)
          MPI_Irecv(notice_in_.data(), static_cast<int>(notice_in_.size()), MPI_BYTE, MPI_ANY_SOURCE, kNoticeTag,
                    MPI_COMM_WORLD, &notice_request_);
      }
      started_ = true;
    }
    cv_.notify_all();
    if (rc != MPI_SUCCESS) return;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) break;  // stop_
        job = jobs_.front();
        jobs_.pop_front();
      }
      execute(*job);
      done_cv_.notify_all();
    }
    if (notice_request_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&notice_request_);
      MPI_Request_free(&notice_request_);
    }
    if (!owns_mpi_) return;
    if (!failure().empty()) {
      // Peers may be blocked on this process or gone: MPI_Finalize could wait for ever. The job
      // failed, so end all of it, which also makes mpirun's exit status non-zero.
      std::fflush(stdout);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }

  // A failed worker's notice to the others: its error, cut to fit the posted receive.
  static constexpr int kNoticeTag = 32700;
  static constexpr std::size_t kNoticeBytes = 4096;

  // On the thread that may call MPI now: the notice a peer sent, "" if none arrived.
  std::string poll_notice() {
    if (notice_request_ == MPI_REQUEST_NULL) return notice_;
    int flag = 0;
    MPI_Status status;
    if (MPI_Test(&notice_request_, &flag, &status) != MPI_SUCCESS || !flag) return {};
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    notice_ = "worker " + std::to_string(status.MPI_SOURCE) + " failed: " +
              std::string(notice_in_.data(), static_cast<std::size_t>(std::max(count, 0)));
    return notice_;
  }

  void send_notice(const std::string& why) {
    notice_out_ = why.substr(0, kNoticeBytes);
    std::vector<MPI_Request> reqs;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      MPI_Request r;
      if (MPI_Isend(notice_out_.data(), static_cast<int>(notice_out_.size()), MPI_BYTE, j, kNoticeTag, MPI_COMM_WORLD,
                    &r) == MPI_SUCCESS)
        reqs.push_back(r);
    }
    // A small message leaves at once; a peer that is gone may never take it (notice_out_ stays).
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    int done = 0;
    while (!done && Clock::now() < deadline) {
      if (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
      if (!done) std::this_thread::yield();
    }
  }

  // Messages above INT_MAX bytes travel as several: MPI counts are ints.
  static constexpr std::size_t kPiece = std::size_t{1} << 30;

  void run(Job& job) {
    std::vector<MPI_Request> reqs;
    std::vector<int> peer_of;      // per request
    std::vector<bool> is_receive;  // per request
    std::string error;
    auto post = [&](const Transfer& t, bool receive) {
      std::byte* data = t.data;
      const std::size_t n = t.size;
      for (std::size_t off = 0; off < n || (n == 0 && off == 0); off += kPiece) {
        const int count = static_cast<int>(std::min(kPiece, n - off));
        MPI_Request r;
        const int rc = receive ? MPI_Irecv(data + off, count, MPI_BYTE, t.peer, job.tag, MPI_COMM_WORLD, &r)
                               : MPI_Isend(data + off, count, MPI_BYTE, t.peer, job.tag, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS && error.empty())
          error = *job.what + ": MPI could not " + (receive ? "receive from" : "send to") + " worker " +
                  std::to_string(t.peer) + ": " + mpi_error_string(rc);
        if (rc == MPI_SUCCESS) {
          reqs.push_back(r);
          peer_of.push_back(t.peer);
          is_receive.push_back(receive);
        }
        if (n == 0) break;
      }
    };
    // Receives first: a message that arrives finds its buffer posted.
    for (const Transfer& t : *job.receives) post(t, true);
    for (const Transfer& t : *job.sends) post(t, false);
    std::vector<bool> complete(reqs.size(), false);
    std::size_t remaining = reqs.size();
    auto pending_peers = [&](bool receives) {
      std::vector<int> peers;
      for (std::size_t i = 0; i < reqs.size(); ++i)
        if (!complete[i] && is_receive[i] == receives && std::find(peers.begin(), peers.end(), peer_of[i]) == peers.end())
          peers.push_back(peer_of[i]);
      std::sort(peers.begin(), peers.end());
      return peers;
    };
    auto list = [](const std::vector<int>& peers) {
      std::ostringstream os;
      for (std::size_t i = 0; i < peers.size(); ++i) os << (i ? ", " : "") << peers[i];
      return os.str();
    };
    auto last_report = Clock::now();
    for (unsigned spins = 0; error.empty() && remaining > 0; ++spins) {
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        if (complete[i]) continue;
        int flag = 0;
        MPI_Status status;
        const int rc = MPI_Test(&reqs[i], &flag, &status);
        if (rc != MPI_SUCCESS) {
          error = *job.what + ": the connection to worker " + std::to_string(peer_of[i]) +
                  " failed (the process may have died): " + mpi_error_string(rc);
          break;
        }
        if (flag) {
          complete[i] = true;
          --remaining;
        }
      }
      if (!error.empty() || remaining == 0) break;
      const auto now = Clock::now();
      if (now - last_report > std::chrono::milliseconds(100)) {
        last_report = now;
        // A wait this long may be for a worker that failed: its notice says so (announce_failure).
        if (std::string notice = poll_notice(); !notice.empty()) {
          error = notice + " (this worker, " + std::to_string(rank_) + ", stopped in " + *job.what + ")";
          break;
        }
        std::vector<int> peers = pending_peers(true);
        if (peers.empty()) peers = pending_peers(false);
        std::lock_guard<std::mutex> lock(mu_);
        waiting_for_ = "worker(s) " + list(peers) + " in " + *job.what;
      }
      if (now >= job.deadline) {
        const std::vector<int> silent = pending_peers(true);
        std::ostringstream os;
        os << *job.what << " timed out after " << job.timeout.count() << " ms on worker " << rank_ << ": ";
        if (!silent.empty()) os << "worker(s) " << list(silent) << " never sent their part";
        else os << "worker(s) " << list(pending_peers(false)) << " never took this worker's part";
        os << " (the process died, stalled, or stopped calling collectives)";
        error = os.str();
        break;
      }
      // Polling is what moves data along; yield so that a computing thread on this core runs.
      if (spins > 64) std::this_thread::yield();
    }
    if (error.empty()) return;
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (!complete[i] && is_receive[i]) MPI_Cancel(&reqs[i]);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) failure_ = error;
      // MPI may still write into (or read from) what the incomplete transfers named.
      for (const Transfer& t : *job.receives) graveyard_.push_back(t.keep);
      for (const Transfer& t : *job.sends) graveyard_.push_back(t.keep);
    }
    job.error = error;
  }

  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the thread: a job, or stop; the constructor: started
  std::condition_variable done_cv_;  // callers: a job is done
  std::deque<Job*> jobs_;
  bool started_ = false;
  bool stop_ = false;
  bool owns_mpi_ = true;
  bool serialized_ = false;  // MPI takes calls from any thread, one at a time (set before use)
  std::mutex call_mu_;       // serialized_: the one exchange in flight
  std::string init_error_;
  std::string failure_;
  std::string waiting_for_;
  std::vector<std::shared_ptr<const void>> graveyard_;
  // The notices (announce_failure), touched only by the thread calling MPI.
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  std::vector<char> notice_in_ = std::vector<char>(kNoticeBytes);
  std::string notice_;      // the one received
  std::string notice_out_;  // the one sent (MPI may still read it)
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

WorkerTransport& WorkerTransport::world() {
  static MpiTransport transport;
  return transport;
}

}  // namespace lockstep::distribute
