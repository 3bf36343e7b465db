// `tediserve agent`: one per node. It owns the node's devices (cores on CPU), joins the
// scheduler (Scheduler.Join in worker.proto), starts and stops worker processes on device sets
// when told, and reports workers that exit (docs/design.md section 5). Workers are its
// children and stop with it. When the scheduler goes away the agent stops its workers and
// joins again once the scheduler is back.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "serve/tls.h"

namespace tediserve::serve {

struct AgentOptions {
  std::string join;          // the scheduler's agent address, host:port
  std::string node;          // name of this node (default: the host name)
  // Its devices, one per entry: the core each runs on (default: every core this process may
  // use). A core listed twice backs two devices (several small instances on one core).
  std::vector<int> cores;
  std::string model_dir;     // the model its workers load (default: the scheduler's folder)
  std::string worker_host = "127.0.0.1";  // workers listen here; the scheduler must reach it
  std::string token;         // shared with the scheduler; also given to the workers
  TlsFiles tls;              // mutual TLS with the scheduler; also given to the workers
  std::string exe;           // the tediserve binary (default: this one)
  double retry_s = 1;        // pause between attempts to (re)join
};

// Runs until SIGTERM/SIGINT, stdin closing (`exit_on_stdin_eof`), or a refusal that retrying
// cannot fix (a wrong token, a bad hello); returns that refusal. Prints
// "tediserve-agent joined HOST:PORT as NODE (N devices)" on stdout each time it joins.
Status RunAgent(AgentOptions options, bool exit_on_stdin_eof);

}  // namespace tediserve::serve
