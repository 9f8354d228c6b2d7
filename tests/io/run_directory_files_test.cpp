// The run directory's own files, planted by someone else (issue 41, item 6): a symlink as
// lockstep.lock made a run truncate a file outside the directory and write its pid there.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/directory_lock.hpp"

using namespace lockstep::io;

namespace {
std::string contents(const std::string& path) {
  std::ostringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

// Runs `f` in a child under alarm(5): a hang is a failure (SIGALRM), not a stuck test.
int exit_status_within_5s(const std::function<int()>& f) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(5);
    ::_exit(f());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(RunDirectoryFiles, ALockFileThatIsASymlinkIsRefusedAndItsTargetUntouched) {
  const std::string dir = fresh_dir("lock_symlink");
  const std::string victim = dir + "/victim.txt", run = dir + "/run";
  std::filesystem::create_directories(run);
  std::ofstream(victim) << "keep me\n";
  std::filesystem::create_symlink(victim, run + "/" + DirectoryLock::kFileName);
  expect_io_error([&] { DirectoryLock lock(run); }, {run, "lockstep.lock' is a symbolic link"});
  EXPECT_EQ(contents(victim), "keep me\n");
  // A dangling link is not followed to create its target either.
  std::filesystem::remove(run + "/" + DirectoryLock::kFileName);
  std::filesystem::create_symlink(dir + "/made.txt", run + "/" + DirectoryLock::kFileName);
  expect_io_error([&] { DirectoryLock lock(run); }, {"is a symbolic link"});
  EXPECT_FALSE(std::filesystem::exists(dir + "/made.txt"));
}

TEST(RunDirectoryFiles, ALockFileThatIsAFifoOrADirectoryIsRefusedWithoutHanging) {
  const std::string run = fresh_dir("lock_fifo");
  const std::string lock_path = run + "/" + DirectoryLock::kFileName;
  ASSERT_EQ(::mkfifo(lock_path.c_str(), 0600), 0);
  expect_io_error([&] { DirectoryLock lock(run); }, {lock_path, "is not a regular file"});
  // In a child as well, so that a regression that blocks in open() fails here instead of hanging.
  EXPECT_EQ(exit_status_within_5s([&] {
              try {
                DirectoryLock lock(run);
              } catch (const lockstep::IOError&) {
                return 3;
              }
              return 0;
            }),
            3);
  std::filesystem::remove(lock_path);
  std::filesystem::create_directories(lock_path);
  expect_io_error([&] { DirectoryLock lock(run); }, {lock_path});
}

// The loser of the race must still read the holder's pid: no truncation before the lock.
TEST(RunDirectoryFiles, ALosingLockDoesNotTruncateTheHoldersPid) {
  const std::string run = fresh_dir("lock_keep_pid");
  DirectoryLock held(run);
  for (int i = 0; i < 3; ++i)
    expect_io_error([&] { DirectoryLock second(run); }, {"is in use by process " + std::to_string(::getpid())});
  EXPECT_EQ(contents(run + "/" + DirectoryLock::kFileName), std::to_string(::getpid()) + "\n");
}

// Symlinks inside a swept directory (to a file or to a folder named like lockstep's own) are
// neither followed nor removed.
TEST(RunDirectoryFiles, TheSweepNeverFollowsOrRemovesSymlinks) {
  const std::string dir = fresh_dir("sweep_links");
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string d = std::to_string(dead);
  const std::string outside = dir + "/outside", run = dir + "/run";
  std::filesystem::create_directories(outside);
  std::filesystem::create_directories(run);
  std::ofstream(outside + "/target.lockstep-tmp." + d) << "x";
  std::filesystem::create_symlink(outside + "/target.lockstep-tmp." + d, run + "/link.lockstep-tmp." + d);
  std::filesystem::create_symlink(outside, run + "/backup.lockstep-tmp." + d);
  EXPECT_EQ(remove_stale_temporaries(run, true), 0);
  EXPECT_TRUE(std::filesystem::exists(outside + "/target.lockstep-tmp." + d));
  EXPECT_TRUE(std::filesystem::is_symlink(run + "/link.lockstep-tmp." + d));
  EXPECT_TRUE(std::filesystem::is_symlink(run + "/backup.lockstep-tmp." + d));
  EXPECT_EQ(remove_stale_temporaries(dir + "/missing"), 0);  // nothing there: nothing to do
}
}  // namespace
