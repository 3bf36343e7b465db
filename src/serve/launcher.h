// Starting and stopping worker processes on this node: what the local agent does
// (docs/design.md section 5). A worker is `tediserve worker` (this same binary) pinned to a
// set of cores; it prints its port on stdout and exits when its stdin closes, so workers never
// outlive the process that started them.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace tediserve::serve {

struct WorkerLaunch {
  std::string exe;        // the tediserve binary
  std::string model_dir;
  int tp = 1;
  std::vector<int> cores;  // one per TP shard
  std::string token;       // passed in the environment, not on the command line
  double start_timeout_s = 120;
};

struct LaunchedWorker {
  pid_t pid = -1;
  std::string address;  // host:port
  int stdin_fd = -1;    // closing it stops the worker
};

// Spawns the worker and waits until it listens (or fails, or the timeout passes).
StatusOr<LaunchedWorker> LaunchWorker(const WorkerLaunch& launch);

// Stops it: closes stdin, SIGTERM, and SIGKILL after `grace_s`; reaps it. Idempotent.
void StopWorker(LaunchedWorker* w, double grace_s = 3);

// True while the process exists and is not a zombie (reaps it if it exited).
bool WorkerAlive(LaunchedWorker* w);

// The running binary's path (/proc/self/exe).
std::string SelfExe();

}  // namespace tediserve::serve
