#include "serve/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

extern char** environ;

namespace tediserve::serve {

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "tediserve";
  buf[n] = 0;
  return buf;
}

StatusOr<LaunchedWorker> LaunchWorker(const WorkerLaunch& l) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Internal("pipe: " + std::string(strerror(errno)));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return Internal("pipe: " + std::string(strerror(errno)));
  }
  std::string cores;
  for (size_t i = 0; i < l.cores.size(); ++i) {
    if (i > 0) cores += ',';
    cores += std::to_string(l.cores[i]);
  }
  std::vector<std::string> args = {l.exe, "worker", "--model", l.model_dir, "--tp", std::to_string(l.tp),
                                   "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"};
  if (!cores.empty()) {
    args.push_back("--cores");
    args.push_back(cores);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e)
    if (strncmp(*e, "TEDISERVE_WORKER_TOKEN=", 23) != 0) env_store.emplace_back(*e);
  if (!l.token.empty()) env_store.push_back("TEDISERVE_WORKER_TOKEN=" + l.token);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, l.exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return Unavailable("cannot start worker " + l.exe + ": " + strerror(rc));
  }
  LaunchedWorker w;
  w.pid = pid;
  w.stdin_fd = in[1];
  // Read "tediserve-worker listening on HOST:PORT\n".
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(l.start_timeout_s);
  const std::string prefix = "tediserve-worker listening on ";
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    if (p.revents & (POLLIN | POLLHUP)) {
      char buf[256];
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
      if (line.size() > 4096) break;
    }
  }
  close(out[0]);
  const size_t at = line.find(prefix);
  const size_t nl = line.find('\n');
  if (at == std::string::npos || nl == std::string::npos || nl < at + prefix.size()) {
    StopWorker(&w, 1);
    return Unavailable("worker (tp " + std::to_string(l.tp) + ", cores " + cores +
                       ") did not start listening; see its error above");
  }
  w.address = line.substr(at + prefix.size(), nl - at - prefix.size());
  return w;
}

bool WorkerAlive(LaunchedWorker* w) {
  if (w->pid <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(w->pid, &status, WNOHANG);
  if (r == w->pid || (r < 0 && errno == ECHILD)) {
    w->pid = -1;
    return false;
  }
  return true;
}

void StopWorker(LaunchedWorker* w, double grace_s) {
  if (w->stdin_fd >= 0) {
    close(w->stdin_fd);
    w->stdin_fd = -1;
  }
  if (w->pid <= 0) return;
  kill(w->pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!WorkerAlive(w)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(w->pid, SIGKILL);
  waitpid(w->pid, nullptr, 0);
  w->pid = -1;
}

}  // namespace tediserve::serve
