// Runs the real `tediserve` binary as a child process for end-to-end tests: fork + exec (no
// shell), a timeout, a capped address space, stdout/stderr captured.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "common/temp_dir.h"
#include "engine/safetensors.h"

namespace tediserve::e2e {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kBinary = TEDISERVE_BIN;
constexpr std::chrono::seconds kTimeout{60};
constexpr rlim_t kChildAddressSpace = rlim_t{4} << 30;  // 4 GiB: the tiny model needs far less

// Under AddressSanitizer the child reserves terabytes of shadow address space, so an
// address-space cap would make every run fail at start-up; ASan's own allocation limit
// (and the binary's memory checks) take its place.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCapChildAddressSpace = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCapChildAddressSpace = false;
#else
constexpr bool kCapChildAddressSpace = true;
#endif
#else
constexpr bool kCapChildAddressSpace = true;
#endif

inline const fs::path& RealModelDir() {
  static const fs::path dir = fs::path(TEDI_SOURCE_DIR) / "models" / "tiny-llada";
  return dir;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

struct RunResult {
  bool spawned = false;
  bool timed_out = false;
  std::chrono::seconds timeout = kTimeout;
  int wait_status = 0;
  std::string out, err;
  double wall_s = 0;

  bool exited() const { return spawned && !timed_out && WIFEXITED(wait_status); }
  int code() const { return exited() ? WEXITSTATUS(wait_status) : -1; }
  // For failure messages: how the child ended and what it printed.
  std::string Describe() const {
    std::ostringstream s;
    if (!spawned) {
      s << "[not started]";
    } else if (timed_out) {
      s << "[killed after the " << timeout.count() << " s timeout]";
    } else if (WIFSIGNALED(wait_status)) {
      s << "[killed by signal " << WTERMSIG(wait_status) << " (" << strsignal(WTERMSIG(wait_status)) << ")]";
    } else {
      s << "[exit " << WEXITSTATUS(wait_status) << "]";
    }
    s << " after " << wall_s << " s\n--- stdout ---\n" << out.substr(0, 4000) << "\n--- stderr ---\n"
      << err.substr(0, 4000);
    return s.str();
  }
};

// Runs `tediserve args...` (fork + exec, no shell) with stdout and stderr sent to files in a
// private temp folder and the child's address space capped, so that a runaway allocation
// fails inside the child instead of swapping the machine.
// `cwd`, when not empty, is the child's working directory.
inline RunResult RunCli(const std::vector<std::string>& args, std::chrono::seconds timeout = kTimeout,
                        const std::string& cwd = "") {
  RunResult r;
  r.timeout = timeout;
  TempDir io("tedi_cli_io");
  if (io.path().empty()) return r;
  const std::string out_path = io.File("stdout"), err_path = io.File("stderr");

  std::vector<std::string> argv_s = {kBinary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    r.err = std::string("fork failed: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    setpgid(0, 0);  // its own process group, so a timeout kills anything it started too
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
        dup2(err, STDERR_FILENO) < 0)
      _exit(126);
    for (int fd : {in, out, err})
      if (fd > STDERR_FILENO) close(fd);
    if (kCapChildAddressSpace) {
      const rlimit as{kChildAddressSpace, kChildAddressSpace};
      setrlimit(RLIMIT_AS, &as);
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(125);
    execv(kBinary, argv.data());
    _exit(127);
  }
  r.spawned = true;

  const auto deadline = t0 + timeout;
  for (;;) {
    const pid_t w = waitpid(pid, &r.wait_status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.spawned = false;
      r.err = std::string("waitpid failed: ") + std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &r.wait_status, 0) < 0 && errno == EINTR) {
      }
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

// Bad input: a normal exit with code 2 and `what` in the message on stderr.
inline void ExpectBadInput(const RunResult& r, const std::string& what) {
  ASSERT_TRUE(r.spawned) << r.Describe();
  ASSERT_FALSE(r.timed_out) << "the CLI hung: " << r.Describe();
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the CLI crashed: " << r.Describe();
  EXPECT_NE(r.code(), 0) << r.Describe();
  EXPECT_EQ(r.code(), 2) << "bad input should exit with 2: " << r.Describe();
  EXPECT_THAT(r.err, HasSubstr(what)) << r.Describe();
}

// A run that failed for a reason other than its input (e.g. an output that cannot be
// written): a normal exit with code 1 and `what` on stderr (docs/design.md, "Errors").
inline void ExpectRunFailure(const RunResult& r, const std::string& what) {
  ASSERT_TRUE(r.spawned) << r.Describe();
  ASSERT_FALSE(r.timed_out) << "the CLI hung: " << r.Describe();
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the CLI crashed: " << r.Describe();
  EXPECT_EQ(r.code(), 1) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr(what)) << r.Describe();
}

inline void ExpectSuccess(const RunResult& r) {
  ASSERT_TRUE(r.spawned) << r.Describe();
  ASSERT_FALSE(r.timed_out) << "the CLI hung: " << r.Describe();
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the CLI crashed: " << r.Describe();
  ASSERT_EQ(r.code(), 0) << r.Describe();
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace tediserve::e2e
