#include "core/env.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <vector>

#include "lockstep/core/error.hpp"

extern char** environ;  // POSIX: the process environment, scanned for unknown LOCKSTEP_* names

namespace lockstep::env {

namespace {
constexpr std::string_view kPrefix = "LOCKSTEP_";
constexpr std::int64_t kMaxCount = 1'000'000'000;

// One row per variable.
constexpr Row kRows[] = {
    {"LOCKSTEP_BF16_GEMM", Type::kEnum, "auto", "",
     "bfloat16 GEMMs: oneDNN's native kernels where the CPU has AVX512-BF16 (auto), widened to float32 (widen), "
     "or oneDNN's without checking the CPU (onednn)",
     "auto|widen|onednn"},
    {"LOCKSTEP_CONV_ALGORITHM", Type::kEnum, "auto", "",
     "CPU convolutions: oneDNN's choice and the fused conv+pool kernel (auto), or direct convolutions only (direct)",
     "auto|direct"},
    {"LOCKSTEP_CPU_DEVICES", Type::kInteger, "", "MirroredOptions::num_cpu_devices when 0",
     "logical CPU devices of a default MirroredStrategy (default: min(cores, LOCKSTEP_CPU_THREADS))",
     "a device count", 1, 1024, true},
    {"LOCKSTEP_CPU_THREADS", Type::kInteger, "", "",
     "threads of the default CPU device, and cores replicas share (default: the cores this process may use)",
     "a thread count", 1, 65536},
    {"LOCKSTEP_CUDA_TF32", Type::kFlag, "0", "", "let cuBLAS compute float32 GEMMs with TF32 tensor cores"},
    {"LOCKSTEP_DATA_DIR", Type::kPath, "", "",
     "where the datasets are (default: $HOME/.lockstep/datasets; scripts/setup.sh fills it)", "", 0, 0, true},
    {"LOCKSTEP_EMULATED_GPUS", Type::kInteger, "0", "",
     "gpu:0..N-1 as emulated GPUs with host memory and the CPU's kernels where no real one is visible (tests)",
     "a number of emulated GPUs", 0, 8},
    {"LOCKSTEP_PHASE_TIMES", Type::kFlag, "0", "",
     "print at exit each replica's mean ms per training step in input, forward, backward, exchange wait, update, "
     "and fit's loop's in input wait, step, read, callbacks"},
    {"LOCKSTEP_SYNC_EACH_STEP", Type::kFlag, "0", "FitOptions::defer_reads",
     "fit reads each execution's losses and metrics at its end even where every callback is async-safe "
     "(comparisons: the same logs and weights)",
     "", 0, 0, true},
    {"LOCKSTEP_VERBOSE_RESUME", Type::kFlag, "0", "FitOptions::verbose > 0",
     "print the epoch, batch and step fit resumes from a backup at"},
    {"LOCKSTEP_WORKER_SHM", Type::kFlag, "1", "",
     "workers on one machine meet in a shared-memory segment; 0 makes them use MPI's messages"},
    {"LOCKSTEP_WORKER_SHM_SLOT_MIB", Type::kInteger, "4", "",
     "size of a worker's slot in the shared-memory segment, in MiB", "a whole number of MiB", 1, 65536},
    {"LOCKSTEP_CRASH_AT_WRITE", Type::kInteger, "0", "",
     "test build: the Nth atomic file write writes half its temporary file, then SIGKILLs the process",
     "a write count", 0, kMaxCount, false, Reader::kTestBuild},
    {"LOCKSTEP_INJECT_ENOSPC", Type::kPath, "", "",
     "test build: every atomic write to exactly this path fails with ENOSPC", "", 0, 0, false,
     Reader::kTestBuild},
    {"LOCKSTEP_BIN", Type::kPath, "", "", "bench/*.sh: the lockstep binary (default build/bin/lockstep)", "", 0,
     0, false, Reader::kScripts},
    {"LOCKSTEP_BIN_B", Type::kPath, "", "",
     "bench/compare_cores.sh: a second lockstep binary measured in the same rounds (A/B)", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_PYPI", Type::kText, "", "", "container build: 0 skips the tests that need PyPI packages", "", 0, 0,
     false, Reader::kScripts},
    {"LOCKSTEP_VERSION", Type::kText, "", "", "container build: the image's version label", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_COMMIT", Type::kText, "", "", "container build: the image's commit label", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_BASE_IMAGE", Type::kText, "", "", "scripts/container.sh: the base image", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_CONTAINER_ENGINE", Type::kText, "", "", "scripts/container.sh: podman or docker", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_CONTAINER_CCACHE", Type::kPath, "", "", "scripts/container.sh: a host ccache directory", "", 0, 0,
     false, Reader::kScripts},
    {"LOCKSTEP_PODMAN_ISOLATION", Type::kText, "", "", "scripts/container.sh: podman's build isolation", "", 0, 0,
     false, Reader::kScripts},
    {"LOCKSTEP_PY_VENV", Type::kPath, "", "", "scripts/setup_python.sh: the reference venv", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_PY_PKG_VENV", Type::kPath, "", "", "scripts/setup_python_pkg.sh: the Python package's venv", "", 0, 0,
     false, Reader::kScripts},
    {"LOCKSTEP_PY_IO_VENV", Type::kPath, "", "", "scripts/setup_python_io.sh: the file-format venv", "", 0, 0,
     false, Reader::kScripts},
    {"LOCKSTEP_REF_PYTHON", Type::kPath, "", "", "tests/reference: the Python that runs the references", "", 0,
     0, false, Reader::kScripts},
    {"LOCKSTEP_TEST_MIXED_SHM", Type::kText, "", "", "tests: runs MultiWorkerMixed.* (worker 0 alone without shm)",
     "", 0, 0, false, Reader::kScripts},
    {"LOCKSTEP_TEST_MIXED_OVERLAP", Type::kText, "", "",
     "tests: runs MultiWorkerMixedOverlap.* (off: this worker without the overlap)", "", 0, 0, false,
     Reader::kScripts},
    {"LOCKSTEP_TEST_MIXED_SHARD", Type::kText, "", "",
     "tests: runs MultiWorkerMixedShard.* (off: this worker without sharding)", "", 0, 0, false,
     Reader::kScripts},
    {"HOME", Type::kPath, "", "", "the user's home: the default LOCKSTEP_DATA_DIR is under it", "", 0, 0, true,
     Reader::kLauncher},
    {"OMPI_COMM_WORLD_SIZE", Type::kText, "", "", "set by Open MPI's mpirun: launched under MPI", "", 0, 0,
     false, Reader::kLauncher},
    {"PMIX_RANK", Type::kText, "", "", "set by PMIx launchers (srun --mpi=pmix, prterun): launched under MPI",
     "", 0, 0, false, Reader::kLauncher},
    {"PMI_SIZE", Type::kText, "", "", "set by PMI-1/2 launchers (MPICH, srun): launched under MPI", "", 0, 0,
     false, Reader::kLauncher},
};
constexpr std::size_t kCount = std::size(kRows);

// Variables that were A/B or debug switches, now options fields (issue 36): setting one is an
// error that names the field.
struct Removed {
  std::string_view name;
  std::string_view field;
};
constexpr Removed kRemoved[] = {
    {"LOCKSTEP_CHECK_MIRRORED", "MirroredOptions::check_mirrored"},
    {"LOCKSTEP_GATHER_AHEAD", "FitOptions::gather_ahead"},
    {"LOCKSTEP_GRADIENTS_IN_PLACE", "MirroredOptions::gradients_in_place"},
    {"LOCKSTEP_OVERLAP_GRADIENTS", "MirroredOptions::overlap_gradients"},
    {"LOCKSTEP_PREFETCH_TO_DEVICE", "FitOptions::prefetch_to_device"},
    {"LOCKSTEP_SHARD_UPDATE", "MirroredOptions::shard_optimizer_update"},
};

const char* type_name(Type t) {
  switch (t) {
    case Type::kFlag: return "flag";
    case Type::kInteger: return "integer";
    case Type::kEnum: return "enum";
    case Type::kPath: return "path";
    case Type::kText: return "text";
  }
  return "?";
}

const char* reader_name(Reader r) {
  switch (r) {
    case Reader::kLibrary: return "library";
    case Reader::kTestBuild: return "test build only";
    case Reader::kScripts: return "scripts and tests only";
    case Reader::kLauncher: return "set by the system or launcher";
  }
  return "?";
}

const Row* find_row(std::string_view name) {
  for (const Row& r : kRows)
    if (r.name == name) return &r;
  return nullptr;
}

std::size_t index_of(std::string_view name) {
  if (const Row* r = find_row(name)) return static_cast<std::size_t>(r - kRows);
  throw InternalError(detail::concat("lockstep::env: '", name, "' is not a row of the table (src/core/env.cpp)"));
}

// Unset and empty are alike: `VAR= cmd` is how a shell unsets a variable for one command.
std::optional<std::string> raw(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

ValueError malformed(const Row& r, const std::string& value, const std::string& what) {
  return ValueError(detail::concat(r.name, "='", value, "' is not ", what));
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool parse_flag(const Row& r, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw malformed(r, value, "a flag: use 1 or 0 (or true/false, yes/no, on/off)");
}

std::int64_t parse_integer(const Row& r, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || end == value.c_str() || *end != '\0' || n < r.min || n > r.max)
    throw malformed(r, value, detail::concat(r.accepted, " in [", r.min, ", ", r.max, "]"));
  return n;
}

void parse_enum(const Row& r, const std::string& value) {
  std::string_view rest = r.accepted;
  while (!rest.empty()) {
    const auto bar = rest.find('|');
    if (rest.substr(0, bar) == value) return;
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  throw malformed(r, value, detail::concat("one of ", r.accepted));
}

// Throws ValueError when a value is not one of the row's type.
void validate(const Row& r, const std::string& value) {
  switch (r.type) {
    case Type::kFlag: (void)parse_flag(r, value); break;
    case Type::kInteger: (void)parse_integer(r, value); break;
    case Type::kEnum: parse_enum(r, value); break;
    case Type::kPath:
    case Type::kText: break;
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The process's values, taken at the first read; `error` is the environment's first problem
// apart from the `each_use` rows' values, which are checked when read (tests change them).
struct Snapshot {
  std::optional<std::string> values[kCount];
  std::string error;
};

// The process environment's entries ("NAME=value"): the `each_use` rows', or all the others.
std::vector<std::string> environment(bool each_use_rows) {
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const Row* r = find_row(entry.substr(0, entry.find('=')));
    if ((r != nullptr && r->each_use) == each_use_rows) entries.emplace_back(entry);
  }
  return entries;
}

const Snapshot& snapshot() {
  static const Snapshot s = [] {
    Snapshot r;
    for (std::size_t i = 0; i < kCount; ++i) r.values[i] = raw(kRows[i].name);
    r.error = first_problem(environment(false));
    return r;
  }();
  if (!s.error.empty()) throw ValueError(s.error);
  return s;
}

// The row's current value (read now for `each_use` rows), checked against its type.
std::optional<std::string> value_of(std::string_view name, Type want) {
  const Snapshot& s = snapshot();
  const std::size_t i = index_of(name);
  const Row& r = kRows[i];
  if (r.type != want && !(want == Type::kText && (r.type == Type::kEnum || r.type == Type::kPath)))
    throw InternalError(detail::concat("lockstep::env: ", name, " is a ", type_name(r.type), ", read as a ",
                                       type_name(want)));
  std::optional<std::string> v = r.each_use ? raw(name) : s.values[i];
  if (v) validate(r, *v);
  if (!v && !r.fallback.empty()) v = std::string(r.fallback);
  return v;
}
}  // namespace

std::span<const Row> table() { return kRows; }

void check() {
  (void)snapshot();
  if (const std::string problem = first_problem(environment(true)); !problem.empty()) throw ValueError(problem);
}

std::string first_problem(const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    if (!name.starts_with(kPrefix) || find_row(name) != nullptr) continue;
    for (const Removed& r : kRemoved)
      if (r.name == name)
        return detail::concat("environment variable ", name, " was removed: set ", r.field, " instead");
    return detail::concat("unknown environment variable ", name, ": did you mean ", closest_name(name),
                          "? (`lockstep env` lists the known ones)");
  }
  for (const std::string& entry : entries) {
    const auto eq = entry.find('=');
    const Row* r = find_row(std::string_view(entry).substr(0, eq));
    if (r == nullptr || eq == std::string::npos || eq + 1 == entry.size()) continue;
    try {
      validate(*r, entry.substr(eq + 1));
    } catch (const ValueError& e) {
      return e.what();
    }
  }
  return {};
}

bool flag(std::string_view name) {
  const auto v = value_of(name, Type::kFlag);
  return v && parse_flag(kRows[index_of(name)], *v);
}

std::optional<std::int64_t> integer(std::string_view name) {
  const auto v = value_of(name, Type::kInteger);
  if (!v) return std::nullopt;
  return parse_integer(kRows[index_of(name)], *v);
}

std::string text(std::string_view name) { return value_of(name, Type::kText).value_or(std::string()); }

bool is_set(std::string_view name) {
  const Snapshot& s = snapshot();
  const std::size_t i = index_of(name);
  return kRows[i].each_use ? raw(name).has_value() : s.values[i].has_value();
}

std::string_view closest_name(std::string_view name) {
  std::string_view best;
  std::size_t best_distance = static_cast<std::size_t>(-1);
  for (const Row& r : kRows) {
    if (!r.name.starts_with(kPrefix)) continue;
    const std::size_t d = edit_distance(name, r.name);
    if (d < best_distance) best = r.name, best_distance = d;
  }
  return best;
}

std::string describe() {
  std::ostringstream os;
  os << "Environment variables lockstep knows (any other LOCKSTEP_* variable is an error).\n";
  for (const Row& r : kRows) {
    const auto now = raw(r.name);
    os << "\n" << r.name << "  (" << type_name(r.type);
    if (r.type == Type::kEnum) os << ": " << r.accepted;
    if (r.type == Type::kInteger) os << " in [" << r.min << ", " << r.max << "]";
    os << "; " << reader_name(r.reader) << (r.each_use ? "; read at each use" : "") << ")\n";
    os << "  default: " << (r.fallback.empty() ? "(unset)" : r.fallback) << "   now: " << (now ? *now : "(unset)")
       << "\n";
    if (!r.overrides.empty()) os << "  overrides: " << r.overrides << "\n";
    os << "  " << r.doc << "\n";
  }
  return os.str();
}

}  // namespace lockstep::env
