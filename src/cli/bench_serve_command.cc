#include "cli/bench_serve_command.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cli/fidelity.h"
#include "cli/loadgen.h"
#include "cli/model_setup.h"
#include "cli/serve_command.h"
#include "common/temp_dir.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "policy/latency_profile.h"
#include "policy/scheduler.h"
#include "serve/launcher.h"
#include "sim/calibration.h"
#include "sim/plots.h"
#include "sim/trace.h"

namespace tediserve::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Pct(double v) { return std::isfinite(v) ? Fixed(100 * v, 1) + "%" : "-"; }

// The model's own file if its folder has one, else data/<sub>/<name><suffix> (as serve finds it).
std::string ModelFile(const std::string& model_dir, const std::string& own, const std::string& sub,
                      const std::string& suffix) {
  if (fs::exists(fs::path(model_dir) / own)) return (fs::path(model_dir) / own).string();
  const std::string name = fs::path(model_dir).lexically_normal().filename().string();
  for (const fs::path& root : {fs::path(TEDI_SOURCE_DIR), fs::path(".")})
    if (fs::exists(root / "data" / sub / (name + suffix))) return (root / "data" / sub / (name + suffix)).string();
  return (fs::path(model_dir) / own).string();  // named in the error
}

StatusOr<std::vector<int>> IntList(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 0 || v > 4096) throw std::out_of_range(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument(flag + ": \"" + item + "\" is not an integer in [0, 4096]");
    }
  }
  return out;
}

// ---- The server's address ---------------------------------------------------------------

struct Target {
  std::string host;
  int port = 0;
  std::string Url() const { return "http://" + host + ":" + std::to_string(port); }
};

StatusOr<Target> ParseUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return InvalidArgument("--url: \"" + url + "\" must start with http://");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos)
    return InvalidArgument("--url: give the server's root (http://HOST:PORT), not a path");
  Target t;
  t.port = 80;
  const size_t colon = rest.rfind(':');
  t.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string p = rest.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end != 0 || v < 1 || v > 65535) return InvalidArgument("--url: bad port \"" + p + "\"");
    t.port = static_cast<int>(v);
  }
  if (t.host.empty() || t.host.find_first_of("[]@ ") != std::string::npos)
    return InvalidArgument("--url: bad host in \"" + url + "\" (IPv4 address or name)");
  return t;
}

httplib::Client MakeClient(const Target& t, double read_timeout_s, const std::string& api_key) {
  httplib::Client c(t.host, t.port);
  c.set_connection_timeout(10, 0);
  const auto sec = static_cast<time_t>(read_timeout_s);
  c.set_read_timeout(sec, static_cast<time_t>((read_timeout_s - static_cast<double>(sec)) * 1e6));
  c.set_write_timeout(30, 0);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);  // else Nagle and delayed ACKs add 40 ms to each request on a reused connection
  if (!api_key.empty()) c.set_bearer_token_auth(api_key);
  return c;
}

StatusOr<std::map<std::string, double>> Scrape(const Target& t) {
  httplib::Client c(t.host, t.port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(10, 0);
  auto r = c.Get("/metrics");
  if (!r) return Unavailable("GET " + t.Url() + "/metrics: " + httplib::to_string(r.error()));
  if (r->status != 200) return Unavailable("GET /metrics: HTTP " + std::to_string(r->status));
  return loadgen::ParsePrometheus(r->body);
}

// ---- A server this command starts -------------------------------------------------------

class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }

  Status Start(const std::vector<std::string>& args, const fs::path& dir, double timeout_s, int instances) {
    log_ = (dir / "serve.log").string();
    const std::string port_file = (dir / "port").string();
    std::vector<std::string> argv = args;
    argv.insert(argv.end(), {"--port", "0", "--port-file", port_file});
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return Internal("fork failed");
    if (pid_ == 0) {
      // Only async-signal-safe calls here. The server dies with us.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);
      const int in = open("/dev/null", O_RDONLY);
      const int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in >= 0) dup2(in, 0);
      if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
      }
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    const auto t0 = Clock::now();
    while (Since(t0) < timeout_s) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return Unavailable("the server exited while starting (" + Describe(st) + "); its log ends:\n" + LogTail());
      }
      if (target_.port == 0) {
        std::ifstream f(port_file);
        int port = 0;
        if (f >> port && port > 0) target_ = Target{"127.0.0.1", port};
      }
      if (target_.port > 0) {
        httplib::Client c(target_.host, target_.port);
        c.set_connection_timeout(2, 0);
        c.set_read_timeout(5, 0);
        if (auto r = c.Get("/health"); r && r->status == 200) {
          const json h = json::parse(r->body, nullptr, false);
          if (h.is_object() && h.value("instances_up", 0) >= instances) return Status::Ok();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return Unavailable("the server did not have " + std::to_string(instances) + " workers up within " +
                       Fixed(timeout_s, 0) + " s; its log ends:\n" + LogTail());
  }

  // SIGTERM (the server drains), SIGKILL after 20 s.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 400; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  const Target& target() const { return target_; }

  std::string LogTail(int lines = 20) const {
    std::ifstream f(log_);
    std::deque<std::string> last;
    for (std::string l; std::getline(f, l);) {
      last.push_back(l);
      if (static_cast<int>(last.size()) > lines) last.pop_front();
    }
    std::string out;
    for (const auto& l : last) out += "  " + l + "\n";
    return out;
  }

 private:
  static std::string Describe(int st) {
    if (WIFEXITED(st)) return "exit code " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
    return "status " + std::to_string(st);
  }
  pid_t pid_ = -1;
  std::string log_;
  Target target_;
};

// ---- One run: the plan against one server ----------------------------------------------

struct RunSpec {
  std::string label;   // policy name, or "server"
  double rate = 0;     // 0: not a rate sweep (trace, workload)
  int round = 1, rounds = 1;  // --repeat
  // For folders: tediserve_r800.00[_round2].
  std::string Name() const {
    return label + (rate > 0 ? "_r" + Fixed(rate, 2) : "") + (rounds > 1 ? "_round" + std::to_string(round) : "");
  }
  // For messages and tables: tediserve @ 800.00[ #2].
  std::string Tag() const {
    return label + (rate > 0 ? " @ " + Fixed(rate, 2) : "") + (rounds > 1 ? " #" + std::to_string(round) : "");
  }
};

struct RunResult {
  RunSpec spec;
  std::string url;
  std::vector<loadgen::RequestResult> requests;
  loadgen::Summary summary;
  loadgen::Overhead overhead;
  std::string overhead_error;
  std::vector<loadgen::GaugeSample> gauges;
  int64_t sends_all_busy = 0;  // requests due while every connection was busy
  int connections = 0;
  // --fidelity: the solo probes sent before the run (live), and the comparison with the
  // simulator's replay of the run.
  std::vector<loadgen::RequestResult> probes;
  bool has_fidelity = false;
  fidelity::Comparison fidelity;
  std::vector<loadgen::RequestResult> simulated;  // the replay's requests, in plan order
};

struct Context {
  const BenchServeArgs* args = nullptr;
  const std::vector<engine::TaskProblem>* problems = nullptr;
  bool stderr_tty = false;
};

// Sequential requests before a run (not counted): the workers' first steps are slow.
void Warmup(const Context& ctx, const Target& t) {
  if (ctx.args->warmup <= 0) return;
  httplib::Client c = MakeClient(t, ctx.args->timeout_s, ctx.args->api_key);
  for (int i = 0; i < ctx.args->warmup; ++i) {
    const auto& p = (*ctx.problems)[static_cast<size_t>(i) % ctx.problems->size()];
    json b = {{"prompt", p.prompt}, {"slo_ms", 60000}};
    if (ctx.args->max_tokens > 0) b["max_tokens"] = ctx.args->max_tokens;
    (void)c.Post("/v1/completions", b.dump(), "application/json");
  }
}

// --fidelity: requests sent one at a time to the idle server (after the warm-up, before the
// run), each waiting for the previous answer: what the live path costs beyond the profile.
// `gap_s` apart (at least 2 ms: the server settles).
std::vector<loadgen::RequestResult> RunProbes(const Context& ctx, const Target& t,
                                              const std::vector<loadgen::PlannedRequest>& probes,
                                              double gap_s = 0.002) {
  httplib::Client c = MakeClient(t, ctx.args->timeout_s, ctx.args->api_key);
  std::vector<loadgen::RequestResult> out;
  for (const auto& p : probes) {
    const engine::TaskProblem& prob = (*ctx.problems)[p.problem];
    loadgen::RequestResult r;
    r.id = p.id;
    r.problem = p.problem;
    r.task = prob.task;
    r.slo_s = p.slo_s;
    const std::string body = loadgen::RequestBody(p, prob.prompt, ctx.args->max_tokens).dump();
    const auto t0 = Clock::now();
    auto res = c.Post("/v1/completions", body, "application/json");
    r.latency_s = Since(t0);
    if (res) loadgen::ReadResponse(res->status, res->body, prob.answer, &r);
    else loadgen::ReadResponse(0, "", prob.answer, &r);
    out.push_back(std::move(r));
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.002, gap_s)));
  }
  return out;
}

// --slo-basis live: the latency alone as this server delivers it. After the warm-up, solo
// requests one at a time (as the fidelity probes), 0.3 s apart so that one slow second of a
// shared machine does not set every SLO; the factor is the median of each one's measured
// latency over the profile's latency alone for its lengths.
struct LatencyAlone {
  double factor = 1;
  double mean_s = 0;
  int ok = 0;
};

StatusOr<LatencyAlone> MeasureLatencyAlone(const Context& ctx, const Target& t, const loadgen::SloOptions& so,
                                           int output_len) {
  Warmup(ctx, t);
  const auto plan = fidelity::ProbePlan(ctx.problems->size(), ctx.args->slo_probes, output_len);
  const auto results = RunProbes(ctx, t, plan, 0.3);
  std::vector<double> ratios;
  LatencyAlone out;
  std::string first_error;
  for (const auto& r : results) {
    if (r.http_status != 200) {
      if (first_error.empty()) first_error = "HTTP " + std::to_string(r.http_status) + " " + r.error;
      continue;
    }
    const auto& prob = (*ctx.problems)[r.problem];
    const double alone = loadgen::ProfileSoloLatency(so, static_cast<int>(prob.ids.size()), output_len);
    if (!(alone > 0)) continue;
    ratios.push_back(r.latency_s / alone);
    out.mean_s += r.latency_s;
  }
  if (ratios.size() * 2 < results.size() || ratios.empty())
    return Unavailable("only " + std::to_string(ratios.size()) + " of " + std::to_string(results.size()) +
                       " solo requests were answered (" + first_error + ")");
  out.ok = static_cast<int>(ratios.size());
  out.mean_s /= static_cast<double>(ratios.size());
  std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2), ratios.end());
  out.factor = ratios[ratios.size() / 2];
  return out;
}

// --load-factor: the capacity as this server delivers it. A closed loop keeps
// --capacity-concurrency requests in flight (held-out problems, a 60-s SLO each, so that no
// policy sheds them) for --capacity-seconds. Requests started together finish in waves, so
// answers per second over a few seconds are coarse; the capacity is instead the request
// steps the server ran per second after the first third (the ramp; two scrapes of
// /metrics) over the mean steps of the requests answered. Requests still in flight at the
// end are waited for.
StatusOr<double> MeasureCapacity(const Context& ctx, const Target& t, int output_len) {
  const BenchServeArgs& a = *ctx.args;
  const size_t n = ctx.problems->size();
  const auto t0 = Clock::now();
  const double end = a.capacity_seconds, ramp = end / 3;
  std::atomic<int64_t> next{0}, failed{0};
  std::mutex mu;
  double steps_sum = 0;
  int64_t answered = 0;
  std::vector<std::thread> threads;
  for (int k = 0; k < a.capacity_concurrency; ++k) {
    threads.emplace_back([&] {
      httplib::Client c = MakeClient(t, a.timeout_s, a.api_key);
      while (Since(t0) < end) {
        loadgen::PlannedRequest p;
        p.problem = static_cast<size_t>(next.fetch_add(1)) * 37 % n;
        p.output_len = output_len;
        p.slo_s = 60;
        const auto& prob = (*ctx.problems)[p.problem];
        auto res = c.Post("/v1/completions", loadgen::RequestBody(p, prob.prompt, a.max_tokens).dump(), "application/json");
        if (!res) {
          ++failed;
          return;  // the server is gone or the connection broke: this sender stops
        }
        loadgen::RequestResult r;
        loadgen::ReadResponse(res->status, res->body, prob.answer, &r);
        if (res->status != 200 || r.steps <= 0) {
          ++failed;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        steps_sum += r.steps;
        ++answered;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(ramp));
  auto before = Scrape(t);
  const double t1 = Since(t0);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, end - t1)));
  auto after = Scrape(t);
  const double t2 = Since(t0);
  for (auto& th : threads) th.join();
  if (!before.ok() || !after.ok()) return (before.ok() ? after.status() : before.status());
  if (answered == 0)
    return Unavailable("no request was answered within " + Fixed(end, 1) + " s (" + std::to_string(failed.load()) +
                       " failed)");
  const double steps = loadgen::OverheadBetween(*before, *after).request_steps;
  if (!(steps > 0)) return Unavailable("the server ran no request steps while the capacity was measured");
  return steps / (t2 - t1) / (steps_sum / static_cast<double>(answered));
}

RunResult RunLoad(const Context& ctx, const Target& t, const RunSpec& spec,
                  const std::vector<loadgen::PlannedRequest>& plan,
                  const std::vector<loadgen::PlannedRequest>* probes = nullptr) {
  const BenchServeArgs& a = *ctx.args;
  RunResult out;
  out.spec = spec;
  out.url = t.Url();
  out.requests.resize(plan.size());
  Warmup(ctx, t);
  if (probes != nullptr) out.probes = RunProbes(ctx, t, *probes);
  auto before = Scrape(t);

  // The connection pool. Idle connections form a stack: a request goes to the connection
  // that finished last, so only as many connections are in use as requests are in flight
  // (hundreds of barely used keep-alive connections slow the server down several-fold on
  // this 2-core machine). A request due while every connection is busy waits in `queue`.
  const size_t nthreads = std::min(plan.size(), static_cast<size_t>(a.connections));
  out.connections = static_cast<int>(nthreads);
  struct Slot {
    std::condition_variable cv;
    bool has_job = false;
    size_t job = 0;
  };
  std::vector<Slot> slots(nthreads);
  std::mutex mu;
  std::vector<size_t> idle;  // slot indices, the most recently idle last
  std::deque<size_t> queue;
  bool closed = false;
  std::atomic<int64_t> sent{0}, done{0}, ok{0}, met{0};
  Clock::time_point t0;  // set once every connection thread waits, before the first send

  auto worker = [&](size_t k) {
    httplib::Client c = MakeClient(t, a.timeout_s, a.api_key);
    std::unique_lock<std::mutex> l(mu);
    while (true) {
      size_t i = 0;
      if (!queue.empty()) {
        i = queue.front();
        queue.pop_front();
      } else if (closed) {
        return;
      } else {
        idle.push_back(k);
        slots[k].cv.wait(l, [&] { return slots[k].has_job || closed; });
        if (!slots[k].has_job) return;  // closed while idle (it left `idle` with the close)
        slots[k].has_job = false;
        i = slots[k].job;
      }
      l.unlock();
      const loadgen::PlannedRequest& p = plan[i];
      const engine::TaskProblem& prob = (*ctx.problems)[p.problem];
      loadgen::RequestResult& r = out.requests[i];
      r.id = p.id;
      r.problem = p.problem;
      r.task = prob.task;
      r.planned_s = p.send_s;
      r.slo_s = p.slo_s;
      const std::string body = loadgen::RequestBody(p, prob.prompt, a.max_tokens).dump();
      r.sent_s = Since(t0);
      ++sent;
      auto res = c.Post("/v1/completions", body, "application/json");
      r.done_s = Since(t0);
      // From the arrival time, not the send: a request that waited for a free connection
      // waited in the system (no coordinated omission).
      r.latency_s = r.done_s - r.planned_s;
      if (res) {
        loadgen::ReadResponse(res->status, res->body, prob.answer, &r);
      } else {
        loadgen::ReadResponse(0, "", prob.answer, &r);
        r.error = httplib::to_string(res.error());
      }
      ok += r.outcome == "ok";
      met += r.slo_met;
      ++done;
      l.lock();
    }
  };
  std::vector<std::thread> threads;
  for (size_t k = 0; k < nthreads; ++k) threads.emplace_back(worker, k);
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (idle.size() == nthreads) {
        t0 = Clock::now();
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (a.fidelity && before.ok()) {  // the step counters at the start (nothing ran since `before`)
    loadgen::GaugeSample g;
    g.step_sizes = loadgen::StepSizesBetween({}, *before);
    out.gauges.push_back(std::move(g));
  }

  // Progress on stderr, and the server's gauges for the timeline.
  std::atomic<bool> finished{false};
  std::mutex pmu;
  std::condition_variable pcv;
  const std::string tag = spec.Tag();
  std::thread progress([&] {
    // Half-second ticks: the gauges every second (--plots), the step counters every tick
    // (--fidelity: how fast the steps ran in each half second), a progress line every second.
    int half = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> l(pmu);
        if (pcv.wait_for(l, std::chrono::milliseconds(500), [&] { return finished.load(); })) break;
      }
      ++half;
      const bool gauges = !a.plots_dir.empty() && half % 2 == 0;
      if (gauges || a.fidelity) {
        if (auto m = Scrape(t); m.ok()) {
          loadgen::GaugeSample g;
          g.t = Since(t0);
          g.live = m->count("tediserve_live_requests") ? m->at("tediserve_live_requests") : 0;
          g.waiting = m->count("tediserve_waiting_requests") ? m->at("tediserve_waiting_requests") : 0;
          if (a.fidelity) g.step_sizes = loadgen::StepSizesBetween({}, *m);
          std::lock_guard<std::mutex> l(mu);
          out.gauges.push_back(std::move(g));
        }
      }
      if (half % 2 != 0) continue;
      const int tick = half / 2;
      if (a.quiet || (!ctx.stderr_tty && tick % 5 != 0)) continue;
      const int64_t d = done.load();
      std::ostringstream line;
      line << "[" << tag << "] " << sent.load() << "/" << plan.size() << " sent, " << d << " done, "
           << sent.load() - d << " in flight, attainment so far " << (d ? Pct(static_cast<double>(met.load()) / d) : "-")
           << ", " << Fixed(Since(t0), 1) << " s";
      if (ctx.stderr_tty) std::cerr << "\r\033[K" << line.str() << std::flush;
      else std::cerr << line.str() << "\n";
    }
  });

  for (size_t i = 0; i < plan.size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(plan[i].send_s)));
    std::unique_lock<std::mutex> l(mu);
    if (idle.empty()) {
      ++out.sends_all_busy;
      queue.push_back(i);
      continue;
    }
    Slot& slot = slots[idle.back()];
    idle.pop_back();
    slot.job = i;
    slot.has_job = true;
    l.unlock();
    slot.cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> l(mu);
    closed = true;
    for (size_t k : idle) slots[k].cv.notify_one();
    idle.clear();
  }
  for (auto& th : threads) th.join();
  finished = true;
  pcv.notify_all();
  progress.join();
  if (!a.quiet && ctx.stderr_tty) std::cerr << "\r\033[K";

  auto after = Scrape(t);
  if (before.ok() && after.ok()) out.overhead = loadgen::OverheadBetween(*before, *after);
  else out.overhead_error = (before.ok() ? after.status() : before.status()).message();
  out.summary = loadgen::Summarize(out.requests);
  if (!a.quiet) {
    std::cerr << "[" << tag << "] " << out.summary.requests << " requests, attainment "
              << Pct(out.summary.attainment) << ", accuracy " << Pct(out.summary.accuracy) << ", mean latency "
              << Fixed(1000 * out.summary.latency_mean_s, 1) << " ms, " << Fixed(out.summary.wall_s, 1) << " s\n";
  }
  return out;
}

json RequestJson(const loadgen::RequestResult& r, const engine::TaskProblem& p) {
  json j = {{"id", r.id},
            {"problem", r.problem},
            {"task", r.task},
            {"prompt", p.prompt},
            {"answer", p.answer},
            {"planned_s", r.planned_s},
            {"sent_s", r.sent_s},
            {"latency_s", r.latency_s},
            {"http_status", r.http_status},
            {"outcome", r.outcome},
            {"text", r.text},
            {"correct", r.correct},
            {"slo_s", r.slo_s},
            {"slo_met", r.slo_met},
            {"server_slo_met", r.server_slo_met},
            {"server_latency_s", r.server_latency_s},
            {"steps", r.steps},
            {"mean_threshold", r.mean_threshold},
            {"completion_tokens", r.completion_tokens},
            {"migrations", r.migrations}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

std::vector<loadgen::Aggregate> Aggregates(const std::vector<RunResult>& runs) {
  std::vector<loadgen::RunSummary> rs;
  for (const auto& r : runs) rs.push_back({r.spec.label, r.spec.rate, r.summary});
  return loadgen::AggregateRuns(rs);
}

// Per policy (in order), its goodput rate; empty unless some policy ran at several rates.
std::vector<std::pair<std::string, std::optional<double>>> GoodputRates(const std::vector<loadgen::Aggregate>& agg,
                                                                        double target) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_label;
  bool sweep = false;
  for (const auto& a : agg) {
    if (a.rate <= 0) continue;
    if (!by_label.count(a.label)) order.push_back(a.label);
    by_label[a.label].first.push_back(a.rate);
    by_label[a.label].second.push_back(a.attainment);
    sweep = sweep || by_label[a.label].first.size() > 1;
  }
  std::vector<std::pair<std::string, std::optional<double>>> out;
  if (!sweep) return out;
  for (const auto& l : order) out.emplace_back(l, loadgen::GoodputRate(by_label[l].first, by_label[l].second, target));
  return out;
}

void PrintTable(const std::vector<RunResult>& runs, double target) {
  std::printf("\n%-16s %8s %6s %9s %9s %8s %8s %8s %8s %8s %9s %7s %7s %8s %7s %10s %7s\n", "policy", "rate", "reqs",
              "attain", "(server)", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "accuracy", "goodput/s", "thresh",
              "req/s", "tok/s", "errors", "sched_ovh", "batch");
  for (const auto& r : runs) {
    const auto& s = r.summary;
    const int64_t errors = s.requests - s.completed;
    const std::string who = r.spec.label + (r.spec.rounds > 1 ? " #" + std::to_string(r.spec.round) : "");
    std::printf("%-16s %8s %6lld %9s %9s %8s %8s %8s %8s %8s %9s %7s %7s %8s %7lld %10s %7s\n", who.c_str(),
                r.spec.rate > 0 ? Fixed(r.spec.rate, 2).c_str() : "-", static_cast<long long>(s.requests),
                Pct(s.attainment).c_str(), Pct(s.attainment_server).c_str(), Fixed(1000 * s.latency_mean_s, 1).c_str(),
                Fixed(1000 * s.latency_p50_s, 1).c_str(), Fixed(1000 * s.latency_p90_s, 1).c_str(),
                Fixed(1000 * s.latency_p99_s, 1).c_str(), Pct(s.accuracy).c_str(), Fixed(s.goodput_rps, 2).c_str(),
                Fixed(s.mean_threshold, 3).c_str(), Fixed(s.throughput_rps, 2).c_str(), Fixed(s.tokens_per_s, 1).c_str(),
                static_cast<long long>(errors), r.overhead.valid ? Pct(r.overhead.overhead).c_str() : "-",
                r.overhead.valid ? Fixed(r.overhead.mean_batch, 1).c_str() : "-");
  }
  // Errors by kind, and the client's own delay, when they matter.
  for (const auto& r : runs) {
    std::string kinds;
    for (const auto& [k, n] : r.summary.outcomes)
      if (k != "ok") kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
    if (!kinds.empty()) std::printf("%s: failed requests: %s\n", r.spec.Tag().c_str(), kinds.c_str());
    if (r.sends_all_busy > 0)
      std::printf("%s: %lld requests were due while all %d connections were busy and went late (mean send lag "
                  "%.1f ms, max %.1f ms): raise --connections\n",
                  r.spec.Tag().c_str(), static_cast<long long>(r.sends_all_busy), r.connections,
                  1000 * r.summary.send_lag_mean_s, 1000 * r.summary.send_lag_max_s);
    else if (r.summary.send_lag_max_s > 0.05)
      std::printf("%s: the client sent late (mean %.1f ms, max %.1f ms behind the arrival times) with connections "
                  "free: this machine is busy\n",
                  r.spec.Tag().c_str(), 1000 * r.summary.send_lag_mean_s, 1000 * r.summary.send_lag_max_s);
  }
  std::printf("\nScheduler overhead from /metrics (policy-core CPU time per step batch / step time; in brackets the\n"
              "same calls' wall time and all the loop thread's CPU time - results, dispatch, bookkeeping - per step time):\n");
  for (const auto& r : runs) {
    const auto& o = r.overhead;
    const std::string tag = r.spec.Tag();
    if (!o.valid) {
      std::printf("  %-24s not available%s%s\n", tag.c_str(), r.overhead_error.empty() ? "" : ": ",
                  r.overhead_error.c_str());
      continue;
    }
    std::printf("  %-24s %.4f ms / %.3f ms = %.2f%% [wall %.2f%%, loop %.2f%%] over %.0f batches, mean batch %.1f "
                "requests (%.0f%% of batches > 4, %.0f%% > 8)\n",
                tag.c_str(), o.policy_ms_per_step, o.step_ms, 100 * o.overhead, 100 * o.wall_overhead,
                100 * o.loop_overhead, o.batches, o.mean_batch, 100 * o.batches_over_4, 100 * o.batches_over_8);
    const double legs = o.to_worker_s + o.in_worker_s + o.from_worker_s + o.to_loop_s;
    if (legs > 0)
      std::printf("  %-24s per batch besides the engine's %.3f ms: %.3f ms (to the worker %.3f, in it %.3f, back %.3f, "
                  "to the loop %.3f)\n",
                  "", o.step_ms, 1000 * legs / o.batches, 1000 * o.to_worker_s / o.batches, 1000 * o.in_worker_s / o.batches,
                  1000 * o.from_worker_s / o.batches, 1000 * o.to_loop_s / o.batches);
    // The machine's speed during the run: where every policy turns requests away, answered
    // requests (and accuracy over all requests) follow it.
    double tokens = 0, elapsed = 0;
    for (const auto& c : o.step_sizes) {
      tokens += c.tokens;
      elapsed += c.elapsed_s;
    }
    if (tokens > 0)
      std::printf("  %-24s launch to result per batch token: %.4f ms (the machine's speed during the run)\n", "",
                  1000 * elapsed / tokens);
  }
  // Repeated rounds: the mean of each policy and rate.
  const std::vector<loadgen::Aggregate> agg = Aggregates(runs);
  if (!runs.empty() && runs.front().spec.rounds > 1) {
    std::printf("\nMean over %d rounds (attainment and accuracy: mean [min, max]):\n", runs.front().spec.rounds);
    std::printf("%-16s %8s %24s %24s %9s %9s %7s %7s\n", "policy", "rate", "attainment", "accuracy", "mean_ms",
                "p99_ms", "thresh", "failed");
    for (const auto& a : agg) {
      const std::string att = Pct(a.attainment) + " [" + Pct(a.attainment_min) + ", " + Pct(a.attainment_max) + "]";
      const std::string acc = Pct(a.accuracy) + " [" + Pct(a.accuracy_min) + ", " + Pct(a.accuracy_max) + "]";
      std::printf("%-16s %8s %24s %24s %9s %9s %7s %7lld\n", a.label.c_str(), a.rate > 0 ? Fixed(a.rate, 2).c_str() : "-",
                  att.c_str(), acc.c_str(), Fixed(1000 * a.latency_mean_s, 1).c_str(),
                  Fixed(1000 * a.latency_p99_s, 1).c_str(), Fixed(a.mean_threshold, 3).c_str(),
                  static_cast<long long>(a.failed));
    }
  }
  // Goodput: the highest rate each policy held at the target attainment.
  const auto goodput = GoodputRates(agg, target);
  if (!goodput.empty()) {
    std::printf("\nGoodput (the highest rate with >= %.0f%% SLO attainment%s):\n", 100 * target,
                runs.front().spec.rounds > 1 ? ", on the mean over rounds" : "");
    for (const auto& [l, g] : goodput)
      std::printf("  %-16s %s\n", l.c_str(), g ? (Fixed(*g, 2) + " req/s").c_str() : "none of the rates tried");
  }
  std::fflush(stdout);
}

// --fidelity: the simulator replays the run. The probes, simulated alone on the bare profile,
// give the live path's overhead (fidelity::EstimateOverhead); then the whole plan is simulated
// on the bare profile and with that overhead, and set against the live run.
Status Replay(const Context& ctx, fidelity::SimSetup setup, const std::vector<loadgen::PlannedRequest>& plan,
              const std::vector<loadgen::PlannedRequest>& probe_plan, RunResult* run) {
  setup.overhead = fidelity::Overhead{};
  ASSIGN_OR_RETURN(auto probe_sim, fidelity::SimulatePlan(setup, probe_plan, *ctx.problems));
  std::vector<fidelity::Probe> probes;
  for (size_t i = 0; i < run->probes.size() && i < probe_sim.size(); ++i) {
    const loadgen::RequestResult& live = run->probes[i];
    fidelity::Probe p;
    if (live.outcome == "ok") {
      p.client_s = live.latency_s;
      p.server_s = live.server_latency_s;
      p.steps = live.steps;
    }
    p.simulated_s = probe_sim[i].latency_s;
    p.simulated_steps = probe_sim[i].steps;
    probes.push_back(p);
  }
  fidelity::Overhead overhead = fidelity::EstimateOverhead(probes);
  // With step-time noise, the replay `draws` times with different noise, every draw's
  // requests pooled: attainment and mean latency are then the means over the draws.
  const int draws = std::max(1, ctx.args->fidelity_draws);
  // `first`, when given, receives the first draw's requests (the per-request JSON).
  fidelity::ReplayBatches first_batches;
  auto pooled = [&](const fidelity::SimSetup& s,
                    std::vector<loadgen::RequestResult>* first = nullptr) -> StatusOr<loadgen::Summary> {
    std::vector<loadgen::RequestResult> all;
    for (int k = 0; k < (s.overhead.step_sigma > 0 ? draws : 1); ++k) {
      fidelity::SimSetup sk = s;
      sk.seed = s.seed + static_cast<uint64_t>(k);
      ASSIGN_OR_RETURN(auto one, fidelity::SimulatePlan(sk, plan, *ctx.problems,
                                                        k == 0 && first != nullptr ? &first_batches : nullptr));
      if (k == 0 && first != nullptr) *first = one;
      all.insert(all.end(), one.begin(), one.end());
    }
    // Rates and shares are means over the draws; counts and per-second figures per draw.
    loadgen::Summary sum = loadgen::Summarize(all);
    const int64_t n = static_cast<int64_t>(all.size() / std::max<size_t>(1, plan.size()));
    if (n > 1) {
      for (int64_t* c : {&sum.requests, &sum.completed, &sum.met, &sum.met_server, &sum.correct}) *c /= n;
      for (auto& [outcome, count] : sum.outcomes) count /= n;
      for (double* r : {&sum.offered_rps, &sum.throughput_rps, &sum.goodput_rps, &sum.tokens_per_s})
        *r /= static_cast<double>(n);
    }
    return sum;
  };
  ASSIGN_OR_RETURN(auto bare, fidelity::SimulatePlan(setup, plan, *ctx.problems));
  std::vector<std::pair<std::string, loadgen::Summary>> alternatives;
  if (run->overhead.step_scale > 0) {
    overhead.per_step_s = 0;  // inside the run's own step times
    const fidelity::StepScale one(run->overhead.step_scale);
    fidelity::StepScale by_size = fidelity::StepScaleFrom(run->overhead.step_sizes, run->overhead.step_scale);
    const double sigma = fidelity::StepSigmaFrom(run->overhead.step_sizes);
    // The simpler replays first: what each part of the model adds.
    setup.overhead = overhead;
    setup.overhead.step_scale = one;
    ASSIGN_OR_RETURN(auto one_ratio, fidelity::SimulatePlan(setup, plan, *ctx.problems));
    alternatives.emplace_back("one_ratio", loadgen::Summarize(one_ratio));
    setup.overhead.step_scale = by_size;
    setup.overhead.step_sigma = sigma;
    ASSIGN_OR_RETURN(auto no_level, pooled(setup));
    alternatives.emplace_back("no_level", no_level);
    {
      // An alternative on the same live run: the round trip of every batch (its legs besides
      // the engine, from /metrics) as a fixed cost per batch, and the ratio by size fitted on
      // what is left, with the level. Session 23 compared it with the model below on one run:
      // neither was better at every load (docs/experiments.md).
      const loadgen::Overhead& o = run->overhead;
      const double legs = o.to_worker_s + o.in_worker_s + o.from_worker_s + o.to_loop_s;
      const double round_trip = o.batches > 0 && legs > 0 ? legs / o.batches : 0;
      if (round_trip > 0 && o.step_profile_s > 0 && o.step_elapsed_s > round_trip * o.batches) {
        fidelity::StepScale split = fidelity::StepScaleFrom(
            o.step_sizes, (o.step_elapsed_s - round_trip * o.batches) / o.step_profile_s, round_trip);
        const double split_level_sigma = fidelity::StepLevelFrom(run->gauges, &split, round_trip);
        setup.overhead.per_step_s = round_trip;
        setup.overhead.step_scale = split;
        setup.overhead.step_sigma = std::sqrt(std::max(0.0, sigma * sigma - split_level_sigma * split_level_sigma));
        ASSIGN_OR_RETURN(auto round_trip_per_batch, pooled(setup));
        alternatives.emplace_back("round_trip_per_batch", round_trip_per_batch);
      }
    }
    // The model: the ratio by size, times the level of the half second the step starts in,
    // times independent noise for the scatter the level does not hold.
    const double level_sigma = fidelity::StepLevelFrom(run->gauges, &by_size);
    overhead.step_scale = by_size;
    overhead.step_sigma = std::sqrt(std::max(0.0, sigma * sigma - level_sigma * level_sigma));
  }
  setup.overhead = overhead;
  std::vector<loadgen::RequestResult> with;  // the first draw
  ASSIGN_OR_RETURN(loadgen::Summary with_summary, pooled(setup, &with));
  run->fidelity = fidelity::Compare(run->summary, with_summary, loadgen::Summarize(bare), overhead, alternatives);
  run->fidelity.sim_batches = first_batches;
  run->simulated = std::move(with);
  run->has_fidelity = true;
  return Status::Ok();
}

std::string Signed(double v, int digits, const std::string& unit) {
  if (!std::isfinite(v)) return "-";
  return (v >= 0 ? "+" : "") + Fixed(v, digits) + unit;
}

void PrintFidelity(const std::vector<RunResult>& runs, const std::string& profile) {
  std::printf("\nFidelity: the simulator on the same arrivals, prompts, SLOs, layout and policy (engine in the loop,\n"
              "profile %s x the run's own step times over the profile's, from /metrics (ovh_stp: x that ratio;\n"
              "a number: ms per step from solo probes, where the server has no such series) + the per-request\n"
              "overhead measured on solo probes before each run).\n"
              "Diffs are simulated - live; targets: attainment within %.0f points, mean latency within %.0f%%.\n",
              profile.c_str(), fidelity::kAttainmentTargetPoints, 100 * fidelity::kMeanLatencyTarget);
  std::printf("(srv_*: the server's own view, from a request's arrival at the runtime, against the simulation\n"
              "without the per-request term; bare_*: the simulation on the profile alone; ovh_*: ms.)\n");
  std::printf("%-16s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s %8s %8s %7s %7s %9s %9s %8s %8s\n", "policy", "rate",
              "att_live", "att_sim", "diff_pt", "mean_liv", "mean_sim", "diff", "p90_liv", "p90_sim", "diff",
              "srv_att", "srv_diff", "srv_mean", "ovh_stp", "ovh_req", "bare_att", "bare_mean", "within");
  for (const auto& r : runs) {
    if (!r.has_fidelity) continue;
    const auto& c = r.fidelity;
    const std::string who = r.spec.label + (r.spec.rounds > 1 ? " #" + std::to_string(r.spec.round) : "");
    std::printf("%-16s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s %8s %8s %7s %7s %9s %9s %8s %8s\n", who.c_str(),
                r.spec.rate > 0 ? Fixed(r.spec.rate, 2).c_str() : "-", Pct(c.live.attainment).c_str(),
                Pct(c.sim.attainment).c_str(), Signed(c.attainment_diff_points, 1, "").c_str(),
                Fixed(1e3 * c.live.latency_mean_s, 2).c_str(), Fixed(1e3 * c.sim.latency_mean_s, 2).c_str(),
                Signed(100 * c.mean_latency_diff, 1, "%").c_str(), Fixed(1e3 * c.live.latency_p90_s, 2).c_str(),
                Fixed(1e3 * c.sim.latency_p90_s, 2).c_str(), Signed(100 * c.p90_latency_diff, 1, "%").c_str(),
                Pct(c.live.attainment_server).c_str(), Signed(c.server_attainment_diff_points, 1, "").c_str(),
                Signed(100 * c.server_mean_latency_diff, 1, "%").c_str(),
                (!c.overhead.step_scale.IsOne() ? "x" + Fixed(c.overhead.step_scale.overall, 3)
                                                 : Fixed(1e3 * c.overhead.per_step_s, 3))
                    .c_str(),
                Fixed(1e3 * c.overhead.per_request_s, 3).c_str(),
                Pct(c.sim_profile_only.attainment).c_str(), Fixed(1e3 * c.sim_profile_only.latency_mean_s, 2).c_str(),
                (std::string(c.attainment_within ? "att" : "-") + "/" + (c.mean_latency_within ? "lat" : "-")).c_str());
  }
  // How the replay batched the same requests: many more (smaller) batches on one side means
  // the dynamics differ, whatever the step times.
  bool header = false;
  for (const auto& r : runs) {
    if (!r.has_fidelity || r.fidelity.sim_batches.batches == 0) continue;
    if (!header) {
      std::printf("\nStep batches, live against the replay (its first draw): batches and requests per batch.\n");
      std::printf("%-16s %8s %9s %9s %8s %8s\n", "policy", "rate", "bat_live", "bat_sim", "req_live", "req_sim");
      header = true;
    }
    const auto& sb = r.fidelity.sim_batches;
    const std::string who = r.spec.label + (r.spec.rounds > 1 ? " #" + std::to_string(r.spec.round) : "");
    std::printf("%-16s %8s %9.0f %9lld %8s %8s\n", who.c_str(), r.spec.rate > 0 ? Fixed(r.spec.rate, 2).c_str() : "-",
                r.overhead.batches, static_cast<long long>(sb.batches), Fixed(r.overhead.mean_batch, 2).c_str(),
                Fixed(static_cast<double>(sb.request_steps) / static_cast<double>(sb.batches), 2).c_str());
  }
  // Over rounds: the means, and each difference's mean [min, max].
  struct Acc {
    std::string label;
    double rate = 0;
    int n = 0;
    double att_live = 0, att_sim = 0, mean_live = 0, mean_sim = 0, p90_live = 0, p90_sim = 0;
    std::vector<double> att_diff, mean_diff, srv_att_diff, srv_mean_diff;
    std::vector<std::pair<std::string, std::pair<std::vector<double>, std::vector<double>>>> alt;  // name: diffs
  };
  std::vector<Acc> acc;
  for (const auto& r : runs) {
    if (!r.has_fidelity) continue;
    auto it = std::find_if(acc.begin(), acc.end(),
                           [&](const Acc& a) { return a.label == r.spec.label && a.rate == r.spec.rate; });
    if (it == acc.end()) {
      Acc fresh;
      fresh.label = r.spec.label;
      fresh.rate = r.spec.rate;
      acc.push_back(std::move(fresh));
      it = acc.end() - 1;
    }
    const auto& c = r.fidelity;
    ++it->n;
    it->att_live += c.live.attainment;
    it->att_sim += c.sim.attainment;
    it->mean_live += c.live.latency_mean_s;
    it->mean_sim += c.sim.latency_mean_s;
    it->p90_live += c.live.latency_p90_s;
    it->p90_sim += c.sim.latency_p90_s;
    it->att_diff.push_back(c.attainment_diff_points);
    it->mean_diff.push_back(100 * c.mean_latency_diff);
    it->srv_att_diff.push_back(c.server_attainment_diff_points);
    it->srv_mean_diff.push_back(100 * c.server_mean_latency_diff);
    for (const auto& x : c.alternatives) {
      auto at = std::find_if(it->alt.begin(), it->alt.end(), [&](const auto& e) { return e.first == x.name; });
      if (at == it->alt.end()) {
        it->alt.push_back({x.name, {}});
        at = it->alt.end() - 1;
      }
      at->second.first.push_back(x.attainment_diff_points);
      at->second.second.push_back(100 * x.mean_latency_diff);
    }
  }
  if (acc.empty() || acc.front().n < 2) return;
  auto spread = [](const std::vector<double>& v, const std::string& unit) {
    double m = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return Signed(m, 1, unit) + " [" + Signed(*lo, 1, "") + ", " + Signed(*hi, 1, "") + "]";
  };
  std::printf("\nFidelity, mean over %d rounds (differences: mean [min, max] of the rounds):\n", acc.front().n);
  std::printf("%-16s %8s %8s %8s %24s %9s %9s %24s %9s %9s %24s %24s\n", "policy", "rate", "att_live", "att_sim",
              "diff_points", "mean_liv", "mean_sim", "mean_diff", "p90_liv", "p90_sim", "srv_att_diff", "srv_mean_diff");
  for (const auto& a : acc) {
    const double n = a.n;
    std::printf("%-16s %8s %8s %8s %24s %9s %9s %24s %9s %9s %24s %24s\n", a.label.c_str(),
                a.rate > 0 ? Fixed(a.rate, 2).c_str() : "-", Pct(a.att_live / n).c_str(), Pct(a.att_sim / n).c_str(),
                spread(a.att_diff, "").c_str(), Fixed(1e3 * a.mean_live / n, 2).c_str(),
                Fixed(1e3 * a.mean_sim / n, 2).c_str(), spread(a.mean_diff, "%").c_str(),
                Fixed(1e3 * a.p90_live / n, 2).c_str(), Fixed(1e3 * a.p90_sim / n, 2).c_str(),
                spread(a.srv_att_diff, "").c_str(), spread(a.srv_mean_diff, "%").c_str());
  }
  if (!acc.front().alt.empty()) {
    std::printf("\nSimpler replays of the same runs (one_ratio: the run's overall step-time ratio for every batch,\n"
                "no scatter; no_level: the ratio by batch size and all the scatter as independent noise, no level\n"
                "over time). Differences as above:\n");
    std::printf("%-16s %8s %-10s %24s %24s\n", "policy", "rate", "replay", "diff_points", "mean_diff");
    for (const auto& a : acc)
      for (const auto& [name, d] : a.alt)
        std::printf("%-16s %8s %-10s %24s %24s\n", a.label.c_str(), a.rate > 0 ? Fixed(a.rate, 2).c_str() : "-",
                    name.c_str(), spread(d.first, "").c_str(), spread(d.second, "%").c_str());
  }
  std::fflush(stdout);
}

Status WritePlots(const std::string& dir, const std::vector<RunResult>& runs, double window_s) {
  std::string sweep = "policy,x,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality\n";
  bool plotted_sweep = false;
  std::set<double> rates;
  for (const auto& r : runs) rates.insert(r.spec.rate);
  for (const auto& r : runs) {
    const fs::path sub = fs::path(dir) / r.spec.Name();
    std::error_code ec;
    fs::create_directories(sub, ec);
    {
      std::ofstream f(sub / "timeline.csv");
      f << loadgen::TimelineCsv(r.requests, r.gauges, window_s);
      if (!f) return IoError("cannot write " + (sub / "timeline.csv").string());
    }
    Status s = sim::PlotTimeline(sub.string(), "bench-serve: " + r.spec.Tag() + (r.spec.rate > 0 ? " req/s" : ""));
    if (!s.ok()) return s;
  }
  // The sweep: one point per policy and rate (the mean over rounds; p50 is the rounds' mean p50).
  if (rates.size() > 1) {
    auto c = [](double v) { return std::isfinite(v) ? std::to_string(v) : std::string("nan"); };
    for (const auto& a : Aggregates(runs)) {
      if (a.rate <= 0) continue;
      double p50 = 0;
      int n = 0;
      for (const auto& r : runs)
        if (r.spec.label == a.label && r.spec.rate == a.rate) {
          p50 += r.summary.latency_p50_s;
          ++n;
        }
      plotted_sweep = true;
      sweep += a.label + "," + c(a.rate) + "," + c(a.attainment) + "," + c(a.latency_mean_s) + "," + c(p50 / n) + "," +
               c(a.latency_p99_s) + "," + c(a.accuracy) + "\n";
    }
  }
  if (plotted_sweep) {
    const std::string csv = (fs::path(dir) / "sweep.csv").string();
    std::ofstream f(csv);
    f << sweep;
    f.close();
    if (!f) return IoError("cannot write " + csv);
    RETURN_IF_ERROR(sim::PlotSweep(csv, "request rate (req/s)", (fs::path(dir) / "sweep").string(),
                                   "bench-serve: SLO attainment, latency and accuracy by rate"));
  }
  return Status::Ok();
}

}  // namespace

CLI::App* AddBenchServeCommand(CLI::App& app, BenchServeArgs* a) {
  a->model_dir = DefaultModelDir(kServeModel);
  CLI::App* b = app.add_subcommand(
      "bench-serve", "load generator: held-out prompts to a live server at a rate; attainment, latency, accuracy");
  b->add_option("--url", a->url, "the server (default http://127.0.0.1:8000)");
  b->add_option("--policies", a->policies,
                "start `tediserve serve --policy P` for each, one run per policy and rate, and compare them")
      ->delimiter(',');
  b->add_option("--model", a->model_dir, "model folder: its held-out set, tokenizer, profile (default: the bundled multi-block model, as serve)");
  b->add_option("--tasks", a->tasks, "JSONL of {prompt, answer[, task]} (default: MODEL/heldout.jsonl)");
  b->add_option("--arrivals", a->arrivals, "poisson or gamma")->check(CLI::IsMember({"poisson", "gamma"}));
  b->add_option("--rate", a->rates, "requests/s, one run each (burstgpt: the peak hour's)")
      ->delimiter(',')
      ->check(CLI::Range(1e-6, 1e6));
  b->add_option("--cv", a->cv, "gamma: CV of the inter-arrival times")->check(CLI::Range(1e-3, 100.0));
  b->add_option("--requests", a->requests, "send this many (trace, burstgpt, workload: at most)")
      ->check(CLI::Range(int64_t{1}, loadgen::kMaxRequests));
  b->add_option("--duration", a->duration_s, "seconds of arrivals (trace, burstgpt, workload: cut there)")
      ->check(CLI::Range(1e-3, 1e7));
  b->add_option("--trace", a->trace, "replay a simulator trace (CSV/JSONL: arrival_s, ..., slo_s, priority)");
  b->add_option("--burstgpt", a->burstgpt, "BurstGPT hourly profile CSV (arrivals as the simulator's burstgpt)");
  b->add_option("--minutes-per-hour", a->minutes_per_hour, "burstgpt: minutes each profile hour lasts")
      ->check(CLI::Range(1e-3, 60.0));
  b->add_option("--workload", a->workload, "the arrivals of a `tediserve simulate` config (its workload: and seed)");
  b->add_option("--seed", a->seed, "arrival and prompt-order seed (the simulator's run seed; default 1)");
  b->add_option("--slo-ms", a->slo_ms, "every request's SLO in ms (default: --slo-scale)")->check(CLI::Range(1e-3, 3.6e6));
  b->add_option("--slo-scale", a->slo_scale, "SLO = this x the request's latency alone (0: send none) [10]")
      ->check(CLI::Range(0.0, 1e6));
  b->add_option("--load-factor", a->load_factors,
                 "instead of --rate: rates as these multiples of the capacity measured on the server first "
                 "(e.g. 1.3,2: 1.3 and 2 x capacity)")
      ->delimiter(',')
      ->check(CLI::Range(1e-3, 100.0));
  b->add_option("--capacity-concurrency", a->capacity_concurrency,
                "--load-factor: requests kept in flight while the capacity is measured [64]")
      ->check(CLI::Range(1, 4096));
  b->add_option("--capacity-seconds", a->capacity_seconds, "--load-factor: seconds the capacity is measured over [6]")
      ->check(CLI::Range(2.0, 600.0));
  b->add_option("--slo-basis", a->slo_basis,
                 "--slo-scale's latency alone: live (measured on the server before the runs, solo requests) or "
                 "profile (the latency profile's) [live]")
      ->check(CLI::IsMember({"live", "profile"}));
  b->add_option("--slo-probes", a->slo_probes, "--slo-basis live: solo requests that measure the latency alone [10]")
      ->check(CLI::Range(1, 1000));
  b->add_option("--profile", a->profile, "latency profile CSV for --slo-scale (default: the model's, as serve)");
  b->add_option("--calibration", a->calibration, "calibration JSON for --slo-scale (default: the model's)");
  b->add_option("--max-tokens", a->max_tokens, "max_tokens of every request (default: not sent, the model's)")
      ->check(CLI::Range(1, engine::kMaxSeqLen));
  b->add_option("--connections", a->connections, "client connections (threads) at most [512]")->check(CLI::Range(1, 4096));
  b->add_option("--timeout", a->timeout_s, "seconds one request may take")->check(CLI::Range(0.1, 86400.0));
  b->add_option("--warmup", a->warmup, "requests sent one by one before each run, not counted")
      ->check(CLI::Range(0, 10000));
  b->add_option("--repeat", a->repeat, "rounds of every run (policies interleaved in each round), then the means")
      ->check(CLI::Range(1, 100));
  b->add_option("--goodput-target", a->goodput_target, "attainment the goodput rate must hold")
      ->check(CLI::Range(0.0, 1.0));
  b->add_option("--window", a->window_s, "timeline window in seconds (--plots)")->check(CLI::Range(1e-3, 3600.0));
  b->add_option("--json", a->json_out, "write the runs (summaries, overhead, every request) as JSON here");
  b->add_option("--plots", a->plots_dir, "write timeline and sweep CSVs and PNGs (gnuplot) in this folder");
  b->add_option("--trace-out", a->trace_out, "write what was sent as a simulator trace (tediserve simulate)");
  b->add_flag("--quiet", a->quiet, "no progress lines");
  b->add_option("--api-key", a->api_key, "Bearer key of the server (or TEDISERVE_API_KEY)");
  b->add_option("--layout", a->layout, "--policies: the servers' --layout (default: serve's)");
  b->add_option("--cores", a->cores, "--policies: the servers' --cores (default: serve's)");
  b->add_flag("--no-cache", a->no_cache, "--policies: servers without the KV cache (and SLOs priced so)");
  b->add_option("--serve-arg", a->serve_args, "--policies: one more argument for the servers (repeat the flag)")
      ->allow_extra_args(false);
  b->add_option("--server-start-timeout", a->server_start_timeout_s, "--policies: seconds for a server to come up")
      ->check(CLI::Range(1.0, 3600.0));
  b->add_flag("--fidelity", a->fidelity,
              "after each run, replay it in the simulator (same arrivals, prompts, SLOs, layout, policy, profile) "
              "and print live vs simulated; starts its own servers (--policies, default tediserve)");
  b->add_option("--fidelity-probes", a->fidelity_probes,
                "--fidelity: solo requests before each run that measure the overhead the profile leaves out")
      ->check(CLI::Range(1, 10000));
  b->add_option("--fidelity-draws", a->fidelity_draws,
                "--fidelity: replays of each run with different step-time noise, pooled (default 5)")
      ->check(CLI::Range(1, 100));
  return b;
}

int RunBenchServe(const CLI::App& cmd, const BenchServeArgs& a_in) {
  signal(SIGPIPE, SIG_IGN);
  BenchServeArgs a = a_in;
  if (a.api_key.empty())
    if (const char* k = std::getenv("TEDISERVE_API_KEY")) a.api_key = k;
  // ---- Flags that go together.
  const int files = !a.trace.empty() + !a.burstgpt.empty() + !a.workload.empty();
  if (files > 1) return ReportError(InvalidArgument("give at most one of --trace, --burstgpt and --workload"));
  if (a.fidelity && cmd.count("--url"))
    return ReportError(InvalidArgument("--fidelity starts its own servers (it must know their profile, layout and "
                                       "policy): it excludes --url"));
  if (cmd.count("--fidelity-probes") && !a.fidelity)
    return ReportError(InvalidArgument("--fidelity-probes applies only with --fidelity"));
  if (cmd.count("--fidelity-draws") && !a.fidelity)
    return ReportError(InvalidArgument("--fidelity-draws applies only with --fidelity"));
  if (a.fidelity && a.policies.empty()) a.policies = {"tediserve"};
  if (!a.policies.empty() && cmd.count("--url"))
    return ReportError(InvalidArgument("--url and --policies exclude each other (--policies starts its own servers)"));
  if (a.policies.empty())
    for (const char* f : {"--layout", "--cores", "--no-cache", "--serve-arg"})
      if (cmd.count(f)) return ReportError(InvalidArgument(std::string(f) + " applies only with --policies"));
  for (const auto& p : a.policies) {
    auto named = policy::PolicyOptions::Named(p);
    if (!named.ok()) return ReportError(named.status().WithContext("--policies"));
  }
  if (a.policies.size() > 64) return ReportError(InvalidArgument("--policies: at most 64"));
  loadgen::ArrivalOptions ao;
  ao.seed = a.seed;
  ao.seed_given = cmd.count("--seed") > 0;
  ao.requests = a.requests;
  ao.duration_s = a.duration_s;
  ao.cv = a.cv;
  ao.minutes_per_hour = a.minutes_per_hour;
  if (!a.trace.empty() || !a.workload.empty()) {
    if (cmd.count("--arrivals") || cmd.count("--cv") || !a.rates.empty())
      return ReportError(InvalidArgument(std::string(a.trace.empty() ? "--workload" : "--trace") +
                                         " gives the arrivals: --arrivals, --rate and --cv do not apply"));
    ao.type = a.trace.empty() ? "workload" : "trace";
    ao.file = a.trace.empty() ? a.workload : a.trace;
  } else if (!a.burstgpt.empty()) {
    if (cmd.count("--arrivals") || cmd.count("--cv"))
      return ReportError(InvalidArgument("--burstgpt gives the arrival process: --arrivals and --cv do not apply"));
    ao.type = "burstgpt";
    ao.file = a.burstgpt;
  } else {
    ao.type = a.arrivals;
    if (a.rates.empty() == a.load_factors.empty())
      return ReportError(InvalidArgument(a.rates.empty() ? "--rate is required (requests/s; a list sweeps), or --load-factor"
                                                         : "give one of --rate and --load-factor"));
    if ((a.requests > 0) == (a.duration_s > 0))
      return ReportError(InvalidArgument("give exactly one of --requests and --duration"));
    if (ao.type != "gamma" && cmd.count("--cv")) return ReportError(InvalidArgument("--cv applies to --arrivals gamma"));
  }
  if (!a.burstgpt.empty() && a.rates.empty())
    return ReportError(InvalidArgument("--burstgpt needs --rate (the peak hour's requests/s)"));
  if (cmd.count("--minutes-per-hour") && a.burstgpt.empty())
    return ReportError(InvalidArgument("--minutes-per-hour applies to --burstgpt"));
  if (cmd.count("--slo-ms") && cmd.count("--slo-scale"))
    return ReportError(InvalidArgument("give one of --slo-ms and --slo-scale"));
  if ((cmd.count("--slo-basis") || cmd.count("--slo-probes")) && (a.slo_ms > 0 || a.slo_scale == 0))
    return ReportError(InvalidArgument("--slo-basis and --slo-probes apply to --slo-scale (not --slo-ms or scale 0)"));
  if (cmd.count("--slo-probes") && a.slo_basis != "live")
    return ReportError(InvalidArgument("--slo-probes applies to --slo-basis live"));
  if (a.rates.size() > 64) return ReportError(InvalidArgument("--rate: at most 64 rates"));
  if (a.load_factors.size() > 64) return ReportError(InvalidArgument("--load-factor: at most 64 factors"));
  if (!a.load_factors.empty() && files > 0)
    return ReportError(InvalidArgument("--load-factor applies to --arrivals poisson or gamma (not --trace, --burstgpt, --workload)"));
  if ((cmd.count("--capacity-concurrency") || cmd.count("--capacity-seconds")) && a.load_factors.empty())
    return ReportError(InvalidArgument("--capacity-concurrency and --capacity-seconds apply to --load-factor"));

  Target target;
  if (a.policies.empty()) {
    auto t = ParseUrl(a.url.empty() ? "http://127.0.0.1:8000" : a.url);
    if (!t.ok()) return ReportError(t.status());
    target = *t;
  }

  // ---- The model: held-out problems, lengths, the inputs of the latency alone.
  if (!fs::is_directory(a.model_dir)) return ReportError(NotFound("--model " + a.model_dir + ": no such folder"));
  auto tok = engine::Tokenizer::FromFile((fs::path(a.model_dir) / "tokenizer.json").string());
  if (!tok.ok()) return ReportError(tok.status().WithContext("--model"));
  const std::string tasks = a.tasks.empty() ? (fs::path(a.model_dir) / "heldout.jsonl").string() : a.tasks;
  auto problems = engine::ReadTaskFile(tasks, *tok);
  if (!problems.ok()) return ReportError(problems.status().WithContext("--tasks"));
  auto defaults = engine::LoadGenerationDefaults(a.model_dir);
  if (!defaults.ok()) return ReportError(defaults.status().WithContext("--model"));
  int output_len = defaults->gen_length;
  if (a.max_tokens > 0)
    output_len = (a.max_tokens + defaults->block_size - 1) / defaults->block_size * defaults->block_size;

  // The servers' layout (--policies): --layout, else one TP-1 instance per --cores entry,
  // else one per core (serve's default).
  std::vector<int> layout;
  if (!a.layout.empty()) {
    auto l = IntList(a.layout, "--layout");
    if (!l.ok()) return ReportError(l.status());
    layout = *l;
  } else if (!a.cores.empty()) {
    auto c = IntList(a.cores, "--cores");
    if (!c.ok()) return ReportError(c.status());
    layout.assign(c->size(), 1);
  } else {
    layout.assign(static_cast<size_t>(std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)))), 1);
  }

  loadgen::SloOptions so;
  so.fixed_ms = a.slo_ms;
  so.scale = a.slo_ms > 0 ? 0 : a.slo_scale;
  so.block_size = defaults->block_size;
  so.cache = !a.no_cache;
  policy::LatencyProfile profile;
  if (so.scale > 0) {
    const std::string prof_path =
        a.profile.empty() ? ModelFile(a.model_dir, "latency_profile.csv", "profiles", "-cpu.csv") : a.profile;
    auto prof = policy::LatencyProfile::LoadCsv(prof_path);
    if (!prof.ok()) return ReportError(prof.status().WithContext("--slo-scale needs a latency profile (--profile)"));
    profile = std::move(prof).value();
    const std::string cal_path =
        a.calibration.empty() ? ModelFile(a.model_dir, "calibration.json", "calibrations", ".json") : a.calibration;
    auto cal = sim::LoadCalibration(cal_path);
    if (!cal.ok()) return ReportError(cal.status().WithContext("--slo-scale needs a calibration (--calibration)"));
    if (!layout.empty()) so.solo_tp = std::max(1, *std::min_element(layout.begin(), layout.end()));
    if (!profile.HasTp(so.solo_tp))
      return ReportError(InvalidArgument("the latency profile has no TP " + std::to_string(so.solo_tp) + " column"));
    // As the server prices a request alone: the policy's top threshold.
    so.tokens_per_step = cal->TokensPerStepAt(policy::PolicyOptions{}.thresholds.front());
    so.profile = &profile;
  }

  // ---- --fidelity: what the servers run with, for the simulator.
  fidelity::SimSetup fsetup;
  std::vector<loadgen::PlannedRequest> probe_plan;
  if (a.fidelity) {
    fsetup.model_dir = a.model_dir;
    fsetup.profile_csv =
        a.profile.empty() ? ModelFile(a.model_dir, "latency_profile.csv", "profiles", "-cpu.csv") : a.profile;
    fsetup.calibration =
        a.calibration.empty() ? ModelFile(a.model_dir, "calibration.json", "calibrations", ".json") : a.calibration;
    fsetup.cache = !a.no_cache;
    fsetup.batch_steps = ServeArgs{}.batch_steps;  // serve's default unless passed on below
    // serve's defaults, unless passed on with --serve-arg.
    for (size_t i = 0; i + 1 < a.serve_args.size(); ++i) {
      const std::string& f = a.serve_args[i];
      const std::string& v = a.serve_args[i + 1];
      try {
        if (f == "--max-queue") fsetup.max_live = std::stoi(v);
        if (f == "--batch-steps") fsetup.batch_steps = std::stoi(v);
        if (f == "--slo-scale") fsetup.slo_scale = std::stod(v);
      } catch (const std::exception&) {
        return ReportError(InvalidArgument("--serve-arg " + f + ": bad value \"" + v + "\""));
      }
      if (f == "--profile" || f == "--calibration" || f == "--layout" || f == "--cores" || f == "--policy" ||
          f == "--reconfigure")
        return ReportError(InvalidArgument("--fidelity: give " + f + " to bench-serve itself, not with --serve-arg"));
    }
    fsetup.layout = layout;
    probe_plan = fidelity::ProbePlan(problems->size(), a.fidelity_probes, output_len);
  }

  // ---- The arrivals of each rate (inputs checked before any server is reached; with
  // --load-factor, once the capacity is known).
  std::vector<double> rates = a.rates;
  if (rates.empty()) rates.push_back(0);
  std::vector<std::vector<policy::RequestSpec>> arrivals;
  const auto make_arrivals = [&]() -> Status {
    arrivals.clear();
    for (double rate : rates) {
      loadgen::ArrivalOptions o = ao;
      o.rate = rate;
      ASSIGN_OR_RETURN(auto arr, loadgen::Arrivals(o));
      arrivals.push_back(std::move(arr));
    }
    return Status::Ok();
  };
  if (a.load_factors.empty())
    if (Status st = make_arrivals(); !st.ok()) return ReportError(st);

  Context ctx;
  ctx.args = &a;
  ctx.problems = &*problems;
  ctx.stderr_tty = isatty(2);
  TempDir tmp("tedi_bench_serve");
  const int instances = static_cast<int>(layout.size());  // --policies: workers each server must have up
  const auto server_args = [&](const std::string& pol) {
    std::vector<std::string> args = {serve::SelfExe(), "serve", "--policy", pol, "--model", a.model_dir};
    if (!a.layout.empty()) args.insert(args.end(), {"--layout", a.layout});
    if (!a.cores.empty()) args.insert(args.end(), {"--cores", a.cores});
    if (a.no_cache) args.push_back("--no-cache");
    if (a.profile.size()) args.insert(args.end(), {"--profile", a.profile});
    if (a.calibration.size()) args.insert(args.end(), {"--calibration", a.calibration});
    if (!a.api_key.empty()) args.insert(args.end(), {"--api-key", a.api_key});
    args.insert(args.end(), a.serve_args.begin(), a.serve_args.end());
    return args;
  };
  if (a.policies.empty()) {
    httplib::Client c(target.host, target.port);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(10, 0);
    auto h = c.Get("/health");
    if (!h) return ReportError(Unavailable("cannot reach " + target.Url() + ": " + httplib::to_string(h.error()) +
                                           " (start `tediserve serve`, or give --url or --policies)"));
    if (h->status != 200)
      return ReportError(Unavailable(target.Url() + "/health answers HTTP " + std::to_string(h->status) + ": " +
                                     h->body.substr(0, 200)));
  }

  // ---- What this server delivers now, measured once before every run, so that every
  // policy, rate and round is judged against the same SLOs and rates: the latency alone
  // (--slo-basis live) and the capacity (--load-factor).
  double solo_live_ms = 0, capacity_rps = 0;
  const bool live_slo = so.scale > 0 && a.slo_basis == "live";
  if (live_slo || !a.load_factors.empty()) {
    ServerProcess server;
    Target t = target;
    if (!a.policies.empty()) {
      const fs::path dir = tmp.path() / "measure";
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (!a.quiet) std::cerr << "[measure] starting tediserve serve --policy " << a.policies.front() << "\n";
      Status s = server.Start(server_args(a.policies.front()), dir, a.server_start_timeout_s, instances);
      if (!s.ok()) return ReportError(s.WithContext(live_slo ? "--slo-basis live" : "--load-factor"));
      t = server.target();
    }
    if (live_slo) {
      auto m = MeasureLatencyAlone(ctx, t, so, output_len);
      if (!m.ok()) return ReportError(m.status().WithContext("--slo-basis live"));
      so.live_factor = m->factor;
      solo_live_ms = 1e3 * m->mean_s;
      if (!a.quiet)
        std::cerr << "[latency alone] " << m->ok << " solo requests: mean " << Fixed(solo_live_ms, 2) << " ms, "
                  << Fixed(so.live_factor, 2) << " x the profile's (SLOs = " << Fixed(so.scale, 2) << " x that)\n";
    }
    if (!a.load_factors.empty()) {
      if (!live_slo) Warmup(ctx, t);
      auto c = MeasureCapacity(ctx, t, output_len);
      if (!c.ok()) return ReportError(c.status().WithContext("--load-factor"));
      capacity_rps = *c;
      rates.clear();
      for (double f : a.load_factors) rates.push_back(f * capacity_rps);
      if (!a.quiet)
        std::cerr << "[capacity] " << a.capacity_concurrency << " requests in flight for "
                  << Fixed(a.capacity_seconds, 1) << " s: " << Fixed(capacity_rps, 2) << " requests/s\n";
    }
    server.Stop();
    if (!a.load_factors.empty())
      if (Status st = make_arrivals(); !st.ok()) return ReportError(st.WithContext("--load-factor"));
  }

  // ---- The runs: one plan per rate (identical for every policy).
  struct Planned {
    double rate;
    std::vector<loadgen::PlannedRequest> plan;
  };
  std::vector<Planned> plans;
  for (size_t i = 0; i < rates.size(); ++i) {
    auto plan = loadgen::Plan(arrivals[i], *problems, output_len, so, a.seed);
    if (!plan.ok()) return ReportError(plan.status());
    plans.push_back({rates[i], std::move(plan).value()});
  }
  if (!a.trace_out.empty()) {
    // One file per rate: NAME_rRATE.EXT when there are several.
    const fs::path t(a.trace_out);
    for (const auto& p : plans) {
      const std::string out = plans.size() == 1 ? a.trace_out
                                                : (t.parent_path() / (t.stem().string() + "_r" + Fixed(p.rate, 2) +
                                                                      t.extension().string()))
                                                      .string();
      Status s = sim::WriteTrace(out, loadgen::AsTrace(p.plan));
      if (!s.ok()) return ReportError(s.WithContext("--trace-out"));
    }
  }
  if (!a.plots_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.plots_dir, ec);
    if (ec) return ReportError(IoError("--plots " + a.plots_dir + ": " + ec.message()));
  }

  std::vector<RunResult> runs;
  if (a.policies.empty()) {
    for (int round = 1; round <= a.repeat; ++round)
      for (const auto& p : plans) runs.push_back(RunLoad(ctx, target, {"server", p.rate, round, a.repeat}, p.plan));
  } else {
    // Rounds outermost, policies innermost: on a shared machine each policy sees the same
    // stretch of background load as the others, as nearly as can be; each round starts one
    // policy later than the one before, so that no policy always runs at the same place in
    // a round (the machine's speed can follow the round's rhythm).
    const size_t npol = a.policies.size();
    for (int round = 1; round <= a.repeat; ++round)
    for (const auto& p : plans) {
      for (size_t k = 0; k < npol; ++k) {
        const std::string& pol = a.policies[(k + static_cast<size_t>(round - 1)) % npol];
        RunSpec spec{pol, p.rate, round, a.repeat};
        const fs::path dir = a.plots_dir.empty() ? tmp.path() / spec.Name() : fs::path(a.plots_dir) / spec.Name();
        std::error_code ec;
        fs::create_directories(dir, ec);
        const std::vector<std::string> args = server_args(pol);
        if (!a.quiet) std::cerr << "[" << pol << "] starting tediserve serve --policy " << pol << "\n";
        ServerProcess server;
        Status s = server.Start(args, dir, a.server_start_timeout_s, instances);
        if (!s.ok()) return ReportError(s.WithContext("--policies " + pol));
        runs.push_back(RunLoad(ctx, server.target(), spec, p.plan, a.fidelity ? &probe_plan : nullptr));
        server.Stop();
        if (a.fidelity) {
          fidelity::SimSetup setup = fsetup;
          setup.policy = pol;
          Status fs = Replay(ctx, setup, p.plan, probe_plan, &runs.back());
          if (!fs.ok()) return ReportError(fs.WithContext("--fidelity: simulating " + spec.Tag()));
          const auto& c = runs.back().fidelity;
          if (!a.quiet)
            std::cerr << "[" << spec.Tag() << "] simulated: attainment " << Pct(c.sim.attainment) << " ("
                      << Signed(c.attainment_diff_points, 1, " points") << "), mean latency "
                      << Fixed(1e3 * c.sim.latency_mean_s, 2) << " ms (" << Signed(100 * c.mean_latency_diff, 1, "%")
                      << "); overhead " << Fixed(1e3 * c.overhead.per_step_s, 3) << " ms/step, "
                      << Fixed(1e3 * c.overhead.per_request_s, 3) << " ms/request\n";
        }
      }
    }
  }

  if (so.scale > 0) {
    const std::string basis = a.slo_basis == "live" ? "measured on the server: " + Fixed(solo_live_ms, 2) +
                                                          " ms mean over " + std::to_string(a.slo_probes) +
                                                          " solo requests, " + Fixed(so.live_factor, 2) +
                                                          " x the latency profile's"
                                                    : "from the latency profile";
    std::printf("SLO of each request: %s x its latency alone, %s\n", Fixed(so.scale, 2).c_str(), basis.c_str());
  }
  if (capacity_rps > 0) {
    std::string fr;
    for (size_t i = 0; i < rates.size(); ++i)
      fr += (i ? ", " : "") + Fixed(a.load_factors[i], 2) + " x = " + Fixed(rates[i], 2) + " req/s";
    std::printf("Offered load: %s (the capacity measured on the server first: %s requests/s, %d in flight)\n",
                fr.c_str(), Fixed(capacity_rps, 2).c_str(), a.capacity_concurrency);
  }
  PrintTable(runs, a.goodput_target);
  if (a.fidelity) PrintFidelity(runs, fsetup.profile_csv);
  if (!a.plots_dir.empty()) {
    Status s = WritePlots(a.plots_dir, runs, a.window_s);
    if (s.code() == StatusCode::kFailedPrecondition) std::cerr << "warning: no plots: " << s.message() << "\n";
    else if (!s.ok()) return ReportError(s.WithContext("--plots"));
  }
  if (!a.json_out.empty()) {
    json j;
    j["model"] = fs::path(a.model_dir).lexically_normal().filename().string();
    j["tasks"] = tasks;
    j["seed"] = a.seed;
    j["arrivals"] = {{"type", ao.type}, {"file", ao.file}, {"cv", ao.cv}, {"requests", ao.requests},
                     {"duration_s", ao.duration_s}};
    j["slo"] = {{"fixed_ms", so.fixed_ms}, {"scale", so.scale}};
    if (so.scale > 0) {
      j["slo"]["basis"] = a.slo_basis;
      j["slo"]["live_factor"] = so.live_factor;
      if (solo_live_ms > 0) j["slo"]["latency_alone_mean_ms"] = solo_live_ms;
    }
    j["output_len"] = output_len;
    if (capacity_rps > 0) j["capacity"] = {{"rps", capacity_rps}, {"load_factors", a.load_factors},
                                           {"concurrency", a.capacity_concurrency}, {"seconds", a.capacity_seconds}};
    j["goodput_target"] = a.goodput_target;
    j["runs"] = json::array();
    for (const auto& r : runs) {
      json rj = {{"policy", r.spec.label}, {"rate", r.spec.rate > 0 ? json(r.spec.rate) : json(nullptr)},
                 {"round", r.spec.round}, {"url", r.url}, {"summary", loadgen::ToJson(r.summary)},
                 {"overhead", loadgen::ToJson(r.overhead)}, {"connections", r.connections},
                 {"sends_all_busy", r.sends_all_busy}};
      if (r.has_fidelity) {
        rj["fidelity"] = fidelity::ToJson(r.fidelity);
        json probes = json::array();
        for (const auto& q : r.probes) probes.push_back(RequestJson(q, (*problems)[q.problem]));
        rj["fidelity"]["probe_requests"] = std::move(probes);
        // Request by request, to set against `requests` (same ids, plan order).
        json sims = json::array();
        for (const auto& q : r.simulated)
          sims.push_back({{"id", q.id},
                          {"outcome", q.outcome},
                          {"latency_s", q.latency_s},
                          {"server_latency_s", q.server_latency_s},
                          {"slo_met", q.slo_met},
                          {"steps", q.steps},
                          {"migrations", q.migrations},
                          {"correct", q.correct}});
        rj["fidelity"]["simulated_requests"] = std::move(sims);
      }
      json reqs = json::array();
      for (const auto& q : r.requests) reqs.push_back(RequestJson(q, (*problems)[q.problem]));
      rj["requests"] = std::move(reqs);
      j["runs"].push_back(std::move(rj));
    }
    const auto agg = Aggregates(runs);
    j["means"] = json::array();
    for (const auto& x : agg) j["means"].push_back(loadgen::ToJson(x));
    json g = json::object();
    for (const auto& [label, rate] : GoodputRates(agg, a.goodput_target)) g[label] = rate ? json(*rate) : json(nullptr);
    j["goodput_rate"] = g;
    std::ofstream f(a.json_out);
    f << j.dump(1) << "\n";
    f.close();
    if (!f) return ReportError(IoError("--json: cannot write " + a.json_out));
  }
  return 0;
}

}  // namespace tediserve::cli
