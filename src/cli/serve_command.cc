#include "cli/serve_command.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/model_setup.h"
#include "engine/chat_template.h"
#include "serve/agent.h"
#include "serve/http_server.h"
#include "serve/reconfigurer.h"
#include "serve/runtime.h"
#include "serve/worker.h"

namespace tediserve::cli {
namespace {

namespace fs = std::filesystem;

int g_signal_pipe[2] = {-1, -1};
void OnSignal(int) {
  const int saved = errno;
  if (write(g_signal_pipe[1], "s", 1) < 0) {
  }
  errno = saved;
}

StatusOr<std::vector<int>> IntList(const std::string& s, const std::string& flag, int lo, int hi) {
  std::vector<int> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < lo || v > hi) throw std::out_of_range(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument(flag + ": \"" + item + "\" is not an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
    }
  }
  if (out.size() > 1024) return InvalidArgument(flag + ": too many entries");
  return out;
}

// The model's own file if its folder has one, else data/<sub>/<name><suffix> in the source tree.
std::string ModelFile(const std::string& model_dir, const std::string& own, const std::string& sub,
                      const std::string& suffix) {
  if (fs::exists(fs::path(model_dir) / own)) return (fs::path(model_dir) / own).string();
  const std::string name = fs::path(model_dir).lexically_normal().filename().string();
  for (const fs::path& root : {fs::path(TEDI_SOURCE_DIR), fs::path(".")})
    if (fs::exists(root / "data" / sub / (name + suffix))) return (root / "data" / sub / (name + suffix)).string();
  return (fs::path(model_dir) / own).string();  // named in the error
}

}  // namespace

// --tls-cert / --tls-key / --tls-ca (serve/tls.h): the same three on serve, agent and worker.
static void AddTlsOptions(CLI::App* app, std::string* cert, std::string* key, std::string* ca) {
  app->add_option("--tls-cert", *cert,
                  "mutual TLS between scheduler, agents and workers: this process's certificate (PEM); it must "
                  "name the address others dial (subjectAltName)");
  app->add_option("--tls-key", *key, "mutual TLS: the private key of --tls-cert (PEM)");
  app->add_option("--tls-ca", *ca, "mutual TLS: the CA certificate every peer's certificate must chain to (PEM)");
}

CLI::App* AddServeCommand(CLI::App& app, ServeArgs* a) {
  a->model_dir = DefaultModelDir(kServeModel);
  CLI::App* s = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  s->add_option("--model", a->model_dir, "model folder (default: the bundled multi-block model, tiny-llada-long)");
  s->add_option("--host", a->host, "address to bind (default 127.0.0.1)");
  s->add_option("--port", a->port, "port (0: any free one)")->check(CLI::Range(0, 65535));
  s->add_option("--layout", a->layout, "TP degree of each instance, e.g. 1,1 or 2 (default: one TP-1 per core)");
  s->add_option("--cores", a->cores, "cores to run workers on, e.g. 0,1 (default: 0..n-1)");
  s->add_option("--policy", a->policy, "tediserve, tediserve-paper, fixed, slo-aware, infaas, llumnix, proteus, ...");
  s->add_option("--profile", a->profile, "latency profile CSV of the model on this machine (tediserve profile)");
  s->add_option("--calibration", a->calibration, "calibration JSON: tokens per step and accuracy by threshold");
  s->add_option("--slo-scale", a->slo_scale, "SLO of a request without slo_ms: this x its latency alone")
      ->check(CLI::Range(0.01, 1e6));
  s->add_option("--max-queue", a->max_queue, "live requests before new ones get 429")->check(CLI::Range(1, 1 << 20));
  s->add_option("--batch-steps", a->batch_steps,
                "denoising steps a worker runs per batch before answering: fewer round trips, decisions every batch (default 2)")
      ->check(CLI::Range(1, policy::kMaxBatchSteps));
  s->add_option("--api-key", a->api_key, "require 'Authorization: Bearer KEY' (or TEDISERVE_API_KEY)");
  s->add_option("--max-body-kb", a->max_body_kb, "largest request body")->check(CLI::Range(1, 1 << 20));
  s->add_option("--max-prompt-chars", a->max_prompt_chars, "longest prompt in bytes")->check(CLI::Range(1, 1 << 26));
  s->add_option("--http-threads", a->http_threads, "connections served at once")->check(CLI::Range(4, 8192));
  s->add_option("--drain-seconds", a->drain_s, "on SIGTERM, how long in-flight requests may finish")
      ->check(CLI::Range(0.0, 3600.0));
  s->add_option("--step-timeout", a->step_timeout_s,
                "a step batch unanswered this long (or 50 x its expected time, if more) fails its worker")
      ->check(CLI::Range(0.05, 3600.0));
  s->add_flag("--no-cache", a->no_cache, "recompute every step (no approximate KV cache)");
  s->add_option("--port-file", a->port_file, "write the bound port to this file once listening");
  s->add_option("--agent-listen", a->agent_listen,
                "HOST:PORT where agents join (default 127.0.0.1:0, local only; give an address other machines "
                "reach, and TEDISERVE_CLUSTER_TOKEN, to add agents there)");
  s->add_flag("--no-local-agent", a->no_local_agent, "start no agent here: every worker runs on joined agents");
  s->add_option("--agent-wait", a->agent_wait_s, "at start, seconds to wait for agents to offer the layout's devices")
      ->check(CLI::Range(0.0, 3600.0));
  s->add_option("--chat-template", a->chat_template,
                "chat template for /v1/chat/completions: a tokenizer_config.json, a folder holding one, or a "
                "template file (default: the model folder's tokenizer_config.json, when it has one)");
  CLI::Option* rc = s->add_flag(
      "--reconfigure", a->reconfigure,
      "let the reconfiguration planner change the layout by itself as the load changes (docs/design.md 10.6)");
  s->add_option("--reconfigure-period", a->reconfigure_period_s, "--reconfigure: seconds between decisions")
      ->check(CLI::Range(0.1, 86400.0))
      ->needs(rc);
  s->add_option("--reconfigure-window", a->reconfigure_window_s, "--reconfigure: seconds of arrivals the rates are taken over")
      ->check(CLI::Range(0.1, 86400.0))
      ->needs(rc);
  s->add_option("--reconfigure-min-gain", a->reconfigure_min_gain,
                "--reconfigure: change only when the mean threshold, or at equal thresholds the SLO slack, is this "
                "much (relative) better")
      ->check(CLI::Range(0.0, 9.99))
      ->needs(rc);
  s->add_option("--reconfigure-tp", a->reconfigure_tp, "--reconfigure: candidate TP degrees, e.g. 1,2 (default: the profile's)")
      ->needs(rc);
  s->add_option("--reconfigure-prompt-round", a->reconfigure_prompt_round,
                "--reconfigure: prompt lengths rounded up to a multiple of this to form classes")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(rc);
  s->add_option("--reconfigure-output-round", a->reconfigure_output_round,
                "--reconfigure: output lengths rounded up to a multiple of this, a block multiple (0: the block size)")
      ->check(CLI::Range(0, 1 << 20))
      ->needs(rc);
  // Read by ExpandServeConfig before parsing; declared here for --help and so it parses.
  AddTlsOptions(s, &a->tls_cert, &a->tls_key, &a->tls_ca);
  s->add_option("--config", a->config,
                "read options from this TOML file (key = value, keys: the long flags without --); flags win");
  return s;
}

CLI::App* AddAgentCommand(CLI::App& app, AgentArgs* a) {
  CLI::App* g = app.add_subcommand("agent", "run this node's workers for a scheduler (tediserve serve) it joins");
  g->add_option("--join", a->join, "the scheduler's agent address, HOST:PORT (serve --agent-listen)")->required();
  g->add_option("--node", a->node, "this node's name, unique in the cluster (default: the host name)");
  g->add_option("--cores", a->cores, "its devices: the core behind each, e.g. 0,1,2,3 (default: every core)");
  g->add_option("--model", a->model_dir, "model folder its workers load (default: the scheduler's path)");
  g->add_option("--worker-host", a->worker_host, "address its workers listen on; the scheduler must reach it");
  g->add_option("--retry-seconds", a->retry_s, "pause between attempts to join")->check(CLI::Range(0.01, 3600.0));
  g->add_flag("--exit-on-stdin-eof", a->exit_on_stdin_eof, "exit when stdin closes (set by serve's local agent)");
  AddTlsOptions(g, &a->tls_cert, &a->tls_key, &a->tls_ca);
  return g;
}

int RunAgent(const AgentArgs& a) {
  auto cores = IntList(a.cores, "--cores", 0, 4095);
  if (!cores.ok()) return ReportError(cores.status());
  serve::AgentOptions o;
  o.join = a.join;
  o.node = a.node;
  o.cores = *cores;
  o.model_dir = a.model_dir;
  if (!o.model_dir.empty() && !fs::is_directory(o.model_dir))
    return ReportError(NotFound("--model " + o.model_dir + ": no such folder"));
  o.worker_host = a.worker_host;
  o.retry_s = a.retry_s;
  o.tls = {a.tls_cert, a.tls_key, a.tls_ca};
  if (const char* t = std::getenv("TEDISERVE_CLUSTER_TOKEN")) o.token = t;
  Status s = serve::RunAgent(o, a.exit_on_stdin_eof);
  return s.ok() ? 0 : ReportError(s);
}

CLI::App* AddWorkerCommand(CLI::App& app, WorkerArgs* a) {
  a->model_dir = DefaultModelDir(kServeModel);
  CLI::App* w = app.add_subcommand("worker", "one model instance serving a scheduler over gRPC (started by serve)");
  w->add_option("--model", a->model_dir, "model folder");
  w->add_option("--tp", a->tp, "tensor-parallel degree (cores)")->check(CLI::Range(1, 256));
  w->add_option("--listen", a->listen, "HOST:PORT to listen on (port 0: any)");
  w->add_option("--cores", a->cores, "pin to these cores, e.g. 0,1");
  w->add_flag("--exit-on-stdin-eof", a->exit_on_stdin_eof, "exit when stdin closes (set by the launcher)");
  AddTlsOptions(w, &a->tls_cert, &a->tls_key, &a->tls_ca);
  return w;
}

int RunWorker(const WorkerArgs& a) {
  auto cores = IntList(a.cores, "--cores", 0, 4095);
  if (!cores.ok()) return ReportError(cores.status());
  serve::WorkerOptions o;
  o.model_dir = a.model_dir;
  o.tp = a.tp;
  o.listen = a.listen;
  o.cores = *cores;
  o.tls = {a.tls_cert, a.tls_key, a.tls_ca};
  if (const char* t = std::getenv("TEDISERVE_WORKER_TOKEN")) o.token = t;
  Status s = serve::RunWorker(o, a.exit_on_stdin_eof);
  return s.ok() ? 0 : ReportError(s);
}

StatusOr<std::vector<std::string>> ExpandServeConfig(CLI::App* serve, const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "serve") return args;
  std::string path;
  bool found = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return InvalidArgument("--config needs a file");
      path = args[i + 1];
      found = true;
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
      found = true;
    }
  }
  if (!found) return args;
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the config file " + path);
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(in);
  } catch (const std::exception& e) {
    return InvalidArgument("config file " + path + ": " + e.what());
  }
  auto given = [&](const std::string& flag) {
    for (size_t i = 1; i < args.size(); ++i)
      if (args[i] == flag || args[i].rfind(flag + "=", 0) == 0) return true;
    return false;
  };
  std::vector<std::string> out = {"serve"};
  for (const CLI::ConfigItem& item : items) {
    if (!item.parents.empty() || item.name == "++" || item.name == "--")
      return InvalidArgument("config file " + path + ": sections are not supported (keys go at the top)");
    const std::string flag = "--" + item.name;
    if (item.name == "config") return InvalidArgument("config file " + path + ": config cannot name another file");
    const CLI::Option* opt = serve->get_option_no_throw(flag);
    if (opt == nullptr)
      return InvalidArgument("config file " + path + ": unknown key '" + item.name + "' (see tediserve serve --help)");
    if (given(flag)) continue;  // the command line wins
    if (item.inputs.size() != 1)
      return InvalidArgument("config file " + path + ": '" + item.name + "' needs one value (lists as \"1,1\")");
    const std::string& v = item.inputs[0];
    if (opt->get_type_size_max() == 0) {  // a flag: true or false
      if (v == "true") out.push_back(flag);
      else if (v != "false") return InvalidArgument("config file " + path + ": '" + item.name + "' is true or false");
      continue;
    }
    out.push_back(flag);
    out.push_back(v);
  }
  out.insert(out.end(), args.begin() + 1, args.end());
  return out;
}

int RunServe(const ServeArgs& a) {
  // SIGTERM / SIGINT: the handler only writes to a pipe that one thread waits on (library
  // threads, e.g. OpenBLAS's, exist before main, so blocking the signal is not enough).
  if (pipe(g_signal_pipe) != 0) return ReportError(Internal("pipe failed"));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // One descriptor per connection: raise the soft limit to the hard one (often 1024 -> more),
  // so --http-threads connections can really be open at once.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  serve::RuntimeOptions ro;
  ro.model_dir = a.model_dir;
  if (!fs::is_directory(a.model_dir)) return ReportError(NotFound("--model " + a.model_dir + ": no such folder"));
  auto layout = IntList(a.layout, "--layout", 1, 64);
  if (!layout.ok()) return ReportError(layout.status());
  auto cores = IntList(a.cores, "--cores", 0, 4095);
  if (!cores.ok()) return ReportError(cores.status());
  const int ncpu = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  ro.layout = layout->empty() ? std::vector<int>(static_cast<size_t>(cores->empty() ? ncpu : cores->size()), 1)
                              : *layout;
  ro.cores = *cores;
  ro.policy = a.policy;
  ro.profile_csv = a.profile.empty() ? ModelFile(a.model_dir, "latency_profile.csv", "profiles", "-cpu.csv") : a.profile;
  ro.calibration = a.calibration.empty() ? ModelFile(a.model_dir, "calibration.json", "calibrations", ".json")
                                         : a.calibration;
  ro.slo_scale = a.slo_scale;
  ro.max_live = a.max_queue;
  ro.batch_steps = a.batch_steps;
  ro.step_timeout_s = a.step_timeout_s;
  ro.use_cache = !a.no_cache;
  ro.local_agent = !a.no_local_agent;
  ro.agent_listen = a.agent_listen;
  ro.agent_wait_s = a.agent_wait_s;
  ro.tls = {a.tls_cert, a.tls_key, a.tls_ca};
  // Agents and workers accept only this scheduler: the operator's secret, or a fresh one per
  // run when every agent is local.
  if (const char* t = std::getenv("TEDISERVE_CLUSTER_TOKEN"); t != nullptr && *t != 0) {
    ro.cluster_token = t;
  } else if (a.no_local_agent) {
    return ReportError(InvalidArgument("--no-local-agent: set TEDISERVE_CLUSTER_TOKEN here and on the agents"));
  } else {
    std::ifstream ur("/dev/urandom", std::ios::binary);
    unsigned char b[16] = {};
    ur.read(reinterpret_cast<char*>(b), sizeof b);
    static const char* hex = "0123456789abcdef";
    for (unsigned char c : b) ro.cluster_token += std::string{hex[c >> 4], hex[c & 15]};
  }
  // The chat template: --chat-template, else the model folder's tokenizer_config.json when it
  // has one. One that does not compile is an error now, not a wrong prompt later.
  std::shared_ptr<const engine::ChatTemplate> chat_template;
  nlohmann::ordered_json chat_defaults = nlohmann::ordered_json::object();
  {
    std::string source = a.chat_template;
    const fs::path config = fs::path(a.model_dir) / "tokenizer_config.json";
    if (source.empty() && fs::is_regular_file(config)) {
      std::ifstream in(config);
      const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("chat_template")) source = config.string();
    }
    if (!source.empty()) {
      auto src = engine::LoadChatTemplateSource(source);
      if (!src.ok()) return ReportError(src.status());
      auto compiled = engine::ChatTemplate::Compile(src->text);
      if (!compiled.ok()) return ReportError(compiled.status().WithContext(source));
      chat_template = std::make_shared<const engine::ChatTemplate>(std::move(compiled).value());
      chat_defaults = src->defaults;
    }
  }
  // --reconfigure: created before the runtime, which feeds its monitor every accepted
  // request; started once the runtime is up; stopped before the runtime goes, freed after it.
  std::unique_ptr<serve::Reconfigurer> reconfigurer;
  if (a.reconfigure) {
    serve::ReconfigurerOptions rco;
    rco.period_s = a.reconfigure_period_s;
    rco.window_s = a.reconfigure_window_s;
    rco.min_gain = a.reconfigure_min_gain;
    auto tps = IntList(a.reconfigure_tp, "--reconfigure-tp", 1, 1024);
    if (!tps.ok()) return ReportError(tps.status());
    rco.tp_degrees = *tps;
    rco.prompt_round = a.reconfigure_prompt_round;
    rco.output_round = a.reconfigure_output_round;
    rco.profile_csv = ro.profile_csv;
    rco.calibration = ro.calibration;
    rco.policy = ro.policy;
    auto rc = serve::Reconfigurer::Create(rco);
    if (!rc.ok()) return ReportError(rc.status());
    reconfigurer = std::move(rc).value();
    serve::Reconfigurer* p = reconfigurer.get();
    ro.on_accepted = [p](const policy::RequestSpec& r) { p->Record(r.prompt_len, r.output_len, r.slo); };
  }
  auto rt = serve::Runtime::Start(ro);
  if (!rt.ok()) return ReportError(rt.status());
  if (reconfigurer) {
    Status s = reconfigurer->Start(rt->get());
    if (!s.ok()) return ReportError(s.WithContext("--reconfigure"));
  }

  serve::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.api_key = a.api_key;
  if (ho.api_key.empty())
    if (const char* k = std::getenv("TEDISERVE_API_KEY")) ho.api_key = k;
  ho.max_body_bytes = static_cast<size_t>(a.max_body_kb) * 1024;
  ho.max_prompt_chars = a.max_prompt_chars;
  ho.threads = a.http_threads;
  ho.chat_template = chat_template;
  ho.chat_defaults = chat_defaults;
  serve::HttpServer http(rt->get(), ho);
  auto port = http.Bind();
  if (!port.ok()) return ReportError(port.status());
  {  // one write, so that a log line of another thread cannot land inside it
    std::ostringstream line;
    line << "tediserve serve: " << (*rt)->model_name() << " on http://" << a.host << ":" << *port << " ("
         << ro.layout.size() << " instance(s), policy " << a.policy << "; agents join " << (*rt)->agent_address()
         << ")\n";
    std::cerr << line.str() << std::flush;
  }
  if (!a.port_file.empty()) {
    const std::string tmp = a.port_file + ".tmp";
    std::ofstream(tmp) << *port << "\n";
    std::rename(tmp.c_str(), a.port_file.c_str());
  }
  std::thread signals([&] {
    char c = 0;
    while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    if (c == 'q') return;  // the server stopped by itself
    std::cerr << "tediserve serve: draining (up to " << a.drain_s << " s)" << std::endl;
    (*rt)->Drain(a.drain_s);
    http.Stop();
  });
  http.Serve();
  if (write(g_signal_pipe[1], "q", 1) < 0) {
  }
  signals.join();
  if (reconfigurer) reconfigurer->Stop();
  rt->reset();
  std::cerr << "tediserve serve: stopped" << std::endl;
  return 0;
}

}  // namespace tediserve::cli
