// Files edited by someone else (or by an attacker): every one is refused with an IOError naming
// the file, and none makes lockstep crash, read or delete outside its directory, or trust a
// value it did not check.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/io/crc32c.hpp"
#include "lockstep/io/directory_lock.hpp"
#include "lockstep/io/file_name.hpp"
#include "lockstep/io/safetensors.hpp"

using namespace lockstep;
using namespace lockstep::io;

namespace {
const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

struct Fixture {
  Variable k{Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), "dense/kernel"};
  optimizers::OptimizerPtr opt = optimizers::Adam(0.01);
  std::vector<Variable> vars() const { return {k}; }
};

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// What a (buggy) writer that computes the record CRC correctly would leave: the record's own
// CRC made to match, so that the range checks behind it are reached.
void write_with_crc(const std::string& path, nlohmann::json j) {
  j.erase("record_crc32c");
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", crc32c(j.dump()));
  j["record_crc32c"] = buf;
  write(path, j.dump(2));
}
}  // namespace

// 100,000-deep arrays once overflowed the stack while the error message was built.
TEST(HostileFiles, DeeplyNestedJsonIsRefusedInEveryRecord) {
  const std::string dir = fresh_dir("deep_json");
  Fixture a;
  CheckpointManager(dir).save(a.vars(), a.opt.get(), {});
  const std::string record = dir + "/ckpt-1.json";
  write(record, "{\"format\": \"lockstep-checkpoint\", \"format_version\": " + kDeep + "}");
  expect_io_error([&] { read_checkpoint(dir + "/ckpt-1"); }, {record, "nested deeper than 64 levels"});

  write(dir + "/checkpoint", "{\"all\": " + kDeep + "}");
  expect_io_error([&] { CheckpointManager m(dir); }, {dir + "/checkpoint", "nested deeper than 64 levels"});

  std::string header = "{\"t\": {\"dtype\": \"F32\", \"shape\": " + kDeep + ", \"data_offsets\": [0, 0]}}";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  write(dir + "/deep.safetensors", bytes + header);
  expect_io_error([&] { read_safetensors(dir + "/deep.safetensors"); },
                  {dir + "/deep.safetensors", "nested deeper than 64 levels"});
}

// An edited pointer once made the clean-up of old backups delete <anything>.json/.safetensors.
TEST(HostileFiles, PointerNamesOutsideTheDirectoryAreRefusedBeforeAnyUse) {
  const std::string root = fresh_dir("pointer_escape");
  const std::string dir = root + "/run/backup";
  Fixture a;
  {
    CheckpointManager m(dir, {.max_to_keep = 2});
    m.save(a.vars(), a.opt.get(), {});
  }
  write(root + "/victim.json", "keep me");
  write(root + "/victim.safetensors", "keep me");
  for (const std::string& bad : std::vector<std::string>{"../../victim", "/etc/passwd", "sub/ckpt-1", "..", ".", "", "a\\b"}) {
    nlohmann::json p = {{"all", {bad, "ckpt-1"}}, {"latest", "ckpt-1"}, {"next_number", 2}};
    write(dir + "/checkpoint", p.dump());
    expect_io_error([&] { CheckpointManager m(dir, {.max_to_keep = 1}); },
                    {dir + "/checkpoint", "names '", "not a file name inside"});
  }
  EXPECT_TRUE(std::filesystem::exists(root + "/victim.json"));
  EXPECT_TRUE(std::filesystem::exists(root + "/victim.safetensors"));
  // "latest" must be the newest of "all", and the next number a positive integer.
  write(dir + "/checkpoint", nlohmann::json({{"all", {"ckpt-1"}}, {"latest", "../x"}, {"next_number", 2}}).dump());
  expect_io_error([&] { CheckpointManager m(dir); }, {dir + "/checkpoint", "\"latest\" is '../x'"});
  write(dir + "/checkpoint", nlohmann::json({{"all", {"ckpt-1"}}, {"latest", "ckpt-1"}, {"next_number", -3}}).dump());
  expect_io_error([&] { CheckpointManager m(dir); }, {dir + "/checkpoint", "\"next_number\" is -3"});
}

TEST(FileName, PlainNamesOnly) {
  EXPECT_TRUE(is_plain_file_name("backup-3"));
  EXPECT_TRUE(is_plain_file_name("..hidden"));
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "../x", "a/b", "/abs", "a\\b", std::string("a\0b", 3)})
    EXPECT_FALSE(is_plain_file_name(bad)) << bad;
  EXPECT_EQ(path_in_directory("d", "f", "test"), "d/f");
}

// The training state was neither CRC-covered nor range-checked: "iterations": -1 trained to NaN.
TEST(HostileFiles, TrainingStateIsCrcCoveredAndEveryFieldRangeChecked) {
  const std::string dir = fresh_dir("state_fields");
  Fixture a;
  save_checkpoint(dir + "/ck", a.vars(), a.opt.get(), {.epoch = 2, .batch_in_epoch = 3, .values = {{"m/0", 1.5}}});
  const std::string path = dir + "/ck.json";
  const auto good = nlohmann::json::parse(read_file(path));
  ASSERT_TRUE(good.contains("record_crc32c"));
  EXPECT_EQ(read_checkpoint(dir + "/ck").state.batch_in_epoch, 3);

  auto edited = good;
  edited["state"]["iterations"] = -1;
  write(path, edited.dump(2));  // edited by hand: the record's CRC no longer matches
  expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, "the record's CRC-32C is", "edited or is corrupt"});

  const std::pair<const char*, nlohmann::json> bad_fields[] = {
      {"iterations", -1}, {"epoch", 2.5}, {"epoch", -1}, {"batch_in_epoch", "3"}, {"seed", -1},
      {"learning_rate", nullptr}, {"learning_rate", -0.5}, {"loss_scale", 0}, {"learning_rate_from_schedule", 1}};
  for (const auto& [key, value] : bad_fields) {
    edited = good;
    edited["state"][key] = value;
    write_with_crc(path, edited);
    expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, std::string("\"") + key + "\" is " + value.dump()});
  }
  edited = good;
  edited["state"]["values"]["m/0"] = nullptr;
  write_with_crc(path, edited);
  expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, "\"m/0\" is null"});
  edited = good;
  edited["state"].erase("iterations");
  write_with_crc(path, edited);
  expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, "no \"iterations\""});
  // A version past 32 bits is not truncated to one lockstep knows.
  edited = good;
  edited["format_version"] = 4294967296LL + kCheckpointFormatVersion;
  write_with_crc(path, edited);
  expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, "format version 429496729"});
  edited = good;
  edited["tensors_file"] = "../elsewhere.safetensors";
  write_with_crc(path, edited);
  expect_io_error([&] { read_checkpoint(dir + "/ck"); }, {path, "not a file name inside"});
}

// The rename of an atomic write replaces whatever is at the path: a device, a pipe or a
// directory there is refused (as root, `--metrics-out /dev/full` would have replaced the node).
TEST(HostileFiles, AtomicWritesRefuseTargetsThatAreNotRegularFiles) {
  const std::string dir = fresh_dir("not_regular");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_io_error([&] { write_file_atomic(fifo, "x"); }, {fifo, "is not a regular file"});
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  std::filesystem::create_directories(dir + "/sub");
  expect_io_error([&] { write_file_atomic(dir + "/sub", "x"); }, {dir + "/sub", "is not a regular file"});
  expect_io_error([&] { check_output_path(dir + "/missing/f", "--metrics-out"); },
                  {"--metrics-out '" + dir + "/missing/f' cannot be written", "No such file"});
  EXPECT_NO_THROW(check_output_path(dir + "/new-file", "--metrics-out"));
}

// Two runs at once on one directory both "succeeded", overwriting each other's backups.
TEST(DirectoryLockTest, ASecondHolderIsRefusedNamingTheFirstAndADeadHolderReleasesIt) {
  const std::string dir = fresh_dir("lock");
  {
    DirectoryLock first(dir);
    expect_io_error([&] { DirectoryLock second(dir); },
                    {"run directory '" + dir + "' is in use by process " + std::to_string(::getpid())});
  }
  EXPECT_NO_THROW(DirectoryLock again(dir));

  // A holder killed with SIGKILL never unlocks: the kernel releases its lock. The child only
  // makes raw system calls (it is forked from a process that may have threads).
  const std::string path = dir + "/" + DirectoryLock::kFileName;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  expect_io_error([&] { DirectoryLock while_child_holds(dir); }, {"is in use by process"});
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_NO_THROW(DirectoryLock after_the_crash(dir));
  ::close(ready[0]);
  ::close(ready[1]);
}

// Killed writes left <name>.tmp.<pid> files forever; the sweep then walked a whole --logdir and
// deleted a user's notes/draft.tmp.<dead pid> (issue 41, item 6). Now: one directory, not below
// it, lockstep's own names (the old ones only when asked, for lockstep's own folders).
TEST(HostileFiles, StaleTemporariesOfDeadWritersAreRemovedAndLiveOnesKept) {
  const std::string dir = fresh_dir("stale_tmp");
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);  // now no process has this pid (until it is reused)
  std::filesystem::create_directories(dir + "/backup");
  std::filesystem::create_directories(dir + "/notes");
  const std::string d = std::to_string(dead), me = std::to_string(::getpid());
  const std::vector<std::string> removed{"/model.json.lockstep-tmp." + d, "/backup/backup-3.json.tmp." + d,
                                         "/backup/backup-3.json.lockstep-tmp." + d};
  const std::vector<std::string> kept{"/draft.tmp." + d,          "/notes/draft.tmp." + d,
                                      "/notes/x.lockstep-tmp." + d, "/mine.lockstep-tmp." + me,
                                      "/init.lockstep-tmp.1",      "/backup/checkpoint",
                                      "/x.lockstep-tmp.12ab",      "/.lockstep-tmp." + d};
  for (const auto& f : removed) write(dir + f, "x");
  for (const auto& f : kept) write(dir + f, "x");
  EXPECT_EQ(remove_stale_temporaries(dir), 1);
  EXPECT_EQ(remove_stale_temporaries(dir + "/backup", /*old_names=*/true), 2);
  for (const auto& f : removed) EXPECT_FALSE(std::filesystem::exists(dir + f)) << f;
  for (const auto& f : kept) EXPECT_TRUE(std::filesystem::exists(dir + f)) << f;
}

// An atomic write's temporary file carries lockstep's infix, so that only lockstep's are swept.
TEST(HostileFiles, AFailedAtomicWriteLeavesNoTemporaryAndTheNameIsLockstepsOwn) {
  const std::string dir = fresh_dir("tmp_name");
  write_file_atomic(dir + "/a.json", "{}");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  const std::string planted = dir + "/b.json.lockstep-tmp." + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(planted.c_str(), 0755), 0);  // the temporary's name is taken by a directory
  expect_io_error([&] { write_file_atomic(dir + "/b.json", "{}"); }, {"b.json.lockstep-tmp."});
}

// read_file serves every reader that takes a whole file (checkpoints, .weights.h5, .keras): a
// FIFO with no writer, a device that never ends and a directory are refused at once, by name.
TEST(HostileFiles, ReadFileRefusesWhatIsNotARegularFile) {
  const std::string root = fresh_dir("read_file_kinds");
  const std::string fifo = root + "/model.weights.h5";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto refused = [](const std::string& path, const std::string& why) {
    try {
      (void)lockstep::io::read_file(path);
      ADD_FAILURE() << path << " was read";
    } catch (const lockstep::IOError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(fifo, "not a regular file");
  refused("/dev/zero", "not a regular file");
  refused(root, "is a directory");
  write(root + "/ok.txt", "fine");
  EXPECT_EQ(lockstep::io::read_file(root + "/ok.txt"), "fine");
}
