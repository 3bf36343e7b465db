// Starting and stopping child processes of this same binary: the scheduler starts its local
// agent, an agent starts workers (docs/design.md section 5). A child prints one line saying it
// is ready (a worker: the address it listens on) and exits when its stdin closes, so children
// never outlive the process that started them, even when that one is killed with -9.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "serve/tls.h"

namespace tediserve::serve {

struct ChildProcess {
  pid_t pid = -1;
  std::string ready;  // the rest of its ready line (a worker: host:port)
  int stdin_fd = -1;  // closing it stops the child
};

struct WorkerLaunch {
  std::string exe;        // the tediserve binary
  std::string model_dir;
  int tp = 1;
  std::vector<int> cores;  // one per TP shard
  std::string token;       // passed in the environment, not on the command line
  std::string host = "127.0.0.1";  // the address it listens on (port: any free one)
  TlsFiles tls;
  double start_timeout_s = 120;
};

// Spawns `tediserve worker` and waits until it listens (or fails, or the timeout passes);
// `ready` is its host:port.
StatusOr<ChildProcess> LaunchWorker(const WorkerLaunch& launch);

struct AgentLaunch {
  std::string exe;
  std::string join;        // the scheduler's agent address, host:port
  std::string model_dir;
  std::vector<int> cores;  // the devices it hands out
  std::string node;        // its node name
  std::string token;       // passed in the environment
  TlsFiles tls;
  double start_timeout_s = 30;
};

// Spawns `tediserve agent` and waits until it has joined the scheduler.
StatusOr<ChildProcess> LaunchAgent(const AgentLaunch& launch);

// Stops a child: closes stdin, SIGTERM, and SIGKILL after `grace_s`; reaps it. Idempotent.
void StopChild(ChildProcess* c, double grace_s = 3);

// True while the process exists and is not a zombie (reaps it if it exited).
bool ChildAlive(ChildProcess* c);

// The running binary's path (/proc/self/exe).
std::string SelfExe();

// "0,1,2" for {0, 1, 2}.
std::string JoinInts(const std::vector<int>& v);

}  // namespace tediserve::serve
