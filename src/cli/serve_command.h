// `tediserve serve` (HTTP front end + policy core; starts a local agent), `tediserve agent`
// (one per node: starts workers on its cores) and `tediserve worker` (one model instance),
// docs/design.md section 5.
#pragma once

#include <string>

#include "common/status.h"
#include <vector>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct ServeArgs {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string layout = "";       // e.g. "1,1" (two TP-1 instances) or "2"; default: one TP-1 per core
  std::string cores;             // e.g. "0,1"; default 0..n-1
  std::string policy = "tediserve";
  std::string profile, calibration;  // default: the model's, from its folder or data/
  double slo_scale = 10;
  int max_queue = 256;
  // Steps per step batch (PolicyOptions::batch_steps): 2 halves the round trips of small pace
  // batches, which on the bundled model's CPU workers are 20-25% of a batch's time
  // (docs/experiments.md, "Several steps per batch").
  int batch_steps = 2;
  std::string api_key;           // also from TEDISERVE_API_KEY
  int max_body_kb = 1024;
  int max_prompt_chars = 65536;
  int http_threads = 512;
  double drain_s = 10;
  double step_timeout_s = 30;  // RuntimeOptions::step_timeout_s
  bool no_cache = false;
  std::string port_file;         // write the bound port here once listening (tests, scripts)
  std::string agent_listen = "127.0.0.1:0";  // where agents join
  bool no_local_agent = false;
  double agent_wait_s = 60;
  std::string config;  // the TOML file ExpandServeConfig read
  std::string chat_template;  // file or folder; default: the model's tokenizer_config.json
  // --reconfigure: the planner changes the layout by itself (src/serve/reconfigurer.h).
  bool reconfigure = false;
  double reconfigure_period_s = 30;
  double reconfigure_window_s = 60;
  double reconfigure_min_gain = 0.1;
  std::string reconfigure_tp;         // candidate degrees, e.g. "1,2" (default: the profile's)
  int reconfigure_prompt_round = 32;
  int reconfigure_output_round = 0;   // 0: the block size
  std::string tls_cert, tls_key, tls_ca;  // mutual TLS with agents and workers (serve/tls.h)
};

// `serve --config FILE`: the file's `key = value` lines (TOML; keys are the long flag names
// without --) become flags placed before the command line's own; a flag given on the command
// line wins. `args` is the command line without the program name; returned unchanged unless
// it is a serve command with --config. Errors: a missing or unreadable file, TOML it cannot
// parse, a section, an unknown key.
StatusOr<std::vector<std::string>> ExpandServeConfig(CLI::App* serve, const std::vector<std::string>& args);

struct AgentArgs {
  std::string join;
  std::string node;
  std::string cores;
  std::string model_dir;
  std::string worker_host = "127.0.0.1";
  double retry_s = 1;
  bool exit_on_stdin_eof = false;
  std::string tls_cert, tls_key, tls_ca;
};

struct WorkerArgs {
  std::string model_dir;
  int tp = 1;
  std::string listen = "127.0.0.1:0";
  std::string cores;
  bool exit_on_stdin_eof = false;
  std::string tls_cert, tls_key, tls_ca;
};

CLI::App* AddServeCommand(CLI::App& app, ServeArgs* args);
CLI::App* AddWorkerCommand(CLI::App& app, WorkerArgs* args);
CLI::App* AddAgentCommand(CLI::App& app, AgentArgs* args);
int RunAgent(const AgentArgs& args);
int RunServe(const ServeArgs& args);
int RunWorker(const WorkerArgs& args);

}  // namespace tediserve::cli
