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

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

namespace {

// Spawns exe with args, `env_key`=`env_value` in its environment (replacing any inherited
// one), stdin a pipe from us, stdout read until a line containing `prefix`.
StatusOr<ChildProcess> Spawn(std::vector<std::string> args, const std::string& env_key, const std::string& env_value,
                             const std::string& prefix, double timeout_s, const std::string& what) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Internal("pipe: " + std::string(strerror(errno)));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return Internal("pipe: " + std::string(strerror(errno)));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  const std::string key_eq = env_key + "=";
  for (char** e = environ; *e != nullptr; ++e)
    if (strncmp(*e, key_eq.c_str(), key_eq.size()) != 0) env_store.emplace_back(*e);
  if (!env_value.empty()) env_store.push_back(key_eq + env_value);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return Unavailable("cannot start " + what + " " + args[0] + ": " + strerror(rc));
  }
  ChildProcess c;
  c.pid = pid;
  c.stdin_fd = in[1];
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto ready_line = [&]() -> std::string::size_type {
    const size_t at = text.find(prefix);
    if (at == std::string::npos) return std::string::npos;
    return text.find('\n', at);
  };
  while (ready_line() == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    if (p.revents & (POLLIN | POLLHUP)) {
      char buf[256];
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > 16384) break;
    }
  }
  close(out[0]);
  const size_t nl = ready_line();
  if (nl == std::string::npos) {
    StopChild(&c, 1);
    return Unavailable(what + " did not become ready within " + std::to_string(static_cast<int>(timeout_s)) +
                       " s; see its error above");
  }
  const size_t at = text.find(prefix) + prefix.size();
  c.ready = text.substr(at, nl - at);
  return c;
}

}  // namespace

StatusOr<ChildProcess> LaunchWorker(const WorkerLaunch& l) {
  std::vector<std::string> args = {l.exe, "worker", "--model", l.model_dir, "--tp", std::to_string(l.tp),
                                   "--listen", l.host + ":0", "--exit-on-stdin-eof"};
  if (!l.cores.empty()) {
    args.push_back("--cores");
    args.push_back(JoinInts(l.cores));
  }
  for (const std::string& a : l.tls.Args()) args.push_back(a);
  ASSIGN_OR_RETURN(ChildProcess c, Spawn(std::move(args), "TEDISERVE_WORKER_TOKEN", l.token,
                                         "tediserve-worker listening on ", l.start_timeout_s,
                                         "worker (tp " + std::to_string(l.tp) + ", cores " + JoinInts(l.cores) + ")"));
  return c;
}

StatusOr<ChildProcess> LaunchAgent(const AgentLaunch& l) {
  std::vector<std::string> args = {l.exe, "agent", "--join", l.join, "--node", l.node, "--exit-on-stdin-eof"};
  if (!l.model_dir.empty()) {
    args.push_back("--model");
    args.push_back(l.model_dir);
  }
  if (!l.cores.empty()) {
    args.push_back("--cores");
    args.push_back(JoinInts(l.cores));
  }
  for (const std::string& a : l.tls.Args()) args.push_back(a);
  return Spawn(std::move(args), "TEDISERVE_CLUSTER_TOKEN", l.token, "tediserve-agent joined ", l.start_timeout_s,
               "local agent");
}

bool ChildAlive(ChildProcess* w) {
  if (w->pid <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(w->pid, &status, WNOHANG);
  if (r == w->pid || (r < 0 && errno == ECHILD)) {
    w->pid = -1;
    return false;
  }
  return true;
}

void StopChild(ChildProcess* w, double grace_s) {
  if (w->stdin_fd >= 0) {
    close(w->stdin_fd);
    w->stdin_fd = -1;
  }
  if (w->pid <= 0) return;
  kill(w->pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!ChildAlive(w)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(w->pid, SIGKILL);
  waitpid(w->pid, nullptr, 0);
  w->pid = -1;
}

}  // namespace tediserve::serve
