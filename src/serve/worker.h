// `tediserve worker`: one model instance (TP degree d over d cores) serving the scheduler's
// step batches over gRPC (worker.proto, docs/design.md section 5).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "serve/tls.h"

namespace tediserve::serve {

struct WorkerOptions {
  std::string model_dir;
  int tp = 1;
  std::string listen = "127.0.0.1:0";  // port 0: pick a free one
  std::vector<int> cores;              // pin the process to these cores (empty: no pinning)
  std::string token;                   // required bearer token (empty: none)
  TlsFiles tls;                        // mutual TLS with the scheduler (off: none)
  // Printed once listening, as "tediserve-worker listening on HOST:PORT" on stdout, which the
  // launcher reads to learn the port.
};

// Loads the model, listens, serves until SIGTERM/SIGINT or the stdin pipe closes when
// `exit_on_stdin_eof` (a launcher that dies takes its workers with it). Returns the error
// that stopped it.
Status RunWorker(const WorkerOptions& options, bool exit_on_stdin_eof);

}  // namespace tediserve::serve
