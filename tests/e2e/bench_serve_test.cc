// `tediserve bench-serve` end to end: the load generator against a real server on 127.0.0.1
// (its JSON adds up, every request is graded), the policy comparison that starts its own
// servers, the plots, and bad flags (a clear message, exit code 2).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Result {
  int code = -1;  // -1: killed (timeout) or crashed
  std::string out, err;
  std::string Describe() const {
    return "[exit " + std::to_string(code) + "]\n--- stdout ---\n" + out.substr(0, 6000) + "\n--- stderr ---\n" +
           err.substr(0, 6000);
  }
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs `tediserve args...` in its own process group (killed as a group after timeout_s).
// No address-space cap: the servers it starts hold hundreds of HTTP threads.
Result RunCli(const std::vector<std::string>& args, double timeout_s = 300) {
  tediserve::TempDir io("tedi_bench_serve_io");
  const std::string out = io.File("out"), err = io.File("err");
  std::vector<std::string> argv_s = {TEDISERVE_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  // These tests use the tiny model (one block: fast); serve and bench-serve default to the
  // multi-block one.
  if (!args.empty() && args[0] == "bench-serve" && std::find(args.begin(), args.end(), "--model") == args.end())
    argv_s.insert(argv_s.end(), {"--model", std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada"});
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int in = open("/dev/null", O_RDONLY);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    execv(TEDISERVE_BIN, argv.data());
    _exit(127);
  }
  Result r;
  int st = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      r.out = Slurp(out);
      r.err = Slurp(err) + "\n[killed after the timeout]";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

// One `tediserve serve` on a free loopback port (two TP-1 workers on core 0, as serve_test),
// stopped with SIGTERM at the end.
class Server {
 public:
  Server() {
    const std::string port_file = dir_.File("port");
    std::vector<std::string> args = {TEDISERVE_BIN, "serve",  "--port",   "0",      "--port-file",
                                     port_file,     "--layout", "1,1", "--cores", "0,0",
                                     "--model", std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = dir_.File("serve.log");
    pid_ = fork();
    if (pid_ == 0) {
      const int o = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(o, 1);
      dup2(o, 2);
      execv(TEDISERVE_BIN, argv.data());
      _exit(127);
    }
    for (int i = 0; i < 1200 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::ifstream f(port_file);
      f >> port_;
    }
  }
  ~Server() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  std::string Log() const { return Slurp(dir_.File("serve.log")); }

 private:
  tediserve::TempDir dir_{"tedi_bench_serve_srv"};
  pid_t pid_ = -1;
  int port_ = 0;
};

// The checks every run of the JSON must pass: counts add up, rates in [0, 1], every request
// sent, answered or failed with a reason, and graded.
void CheckRun(const json& run, int requests) {
  const json& s = run["summary"];
  EXPECT_EQ(s["requests"].get<int>(), requests);
  ASSERT_EQ(run["requests"].size(), static_cast<size_t>(requests));
  int outcomes = 0;
  for (const auto& [k, n] : s["outcomes"].items()) outcomes += n.get<int>();
  EXPECT_EQ(outcomes, requests) << s.dump();
  int ok = 0, correct = 0, met = 0;
  for (const json& r : run["requests"]) {
    ASSERT_TRUE(r["outcome"].is_string()) << r.dump();
    ASSERT_TRUE(r["correct"].is_boolean()) << r.dump();
    if (r["outcome"] == "ok") {
      ++ok;
      EXPECT_EQ(r["http_status"], 200);
      EXPECT_GE(r["steps"].get<int>(), 1) << r.dump();
      EXPECT_GT(r["slo_s"].get<double>(), 0) << r.dump();
      EXPECT_GT(r["latency_s"].get<double>(), 0) << r.dump();
      EXPECT_EQ(r["correct"].get<bool>(), r["text"] == r["answer"]) << r.dump();
    } else {
      EXPECT_FALSE(r["correct"].get<bool>());
      EXPECT_TRUE(r.contains("error")) << r.dump();
    }
    correct += r["correct"].get<bool>();
    met += r["slo_met"].get<bool>();
  }
  EXPECT_EQ(s["completed"].get<int>(), ok);
  EXPECT_EQ(s["correct"].get<int>(), correct);
  EXPECT_EQ(s["slo_met"].get<int>(), met);
  for (const char* k : {"attainment", "attainment_server", "accuracy"}) {
    EXPECT_GE(s[k].get<double>(), 0) << k;
    EXPECT_LE(s[k].get<double>(), 1) << k;
  }
  EXPECT_DOUBLE_EQ(s["attainment"].get<double>(), static_cast<double>(met) / requests);
  EXPECT_DOUBLE_EQ(s["accuracy"].get<double>(), static_cast<double>(correct) / requests);
}

TEST(BenchServeTest, LoadAgainstARunningServerAddsUpAndGrades) {
  Server server;
  ASSERT_GT(server.port(), 0) << server.Log();
  tediserve::TempDir d("tedi_bench_serve");
  const std::string js = d.File("out.json"), trace = d.File("sent.csv"), plots = d.File("plots");
  const int n = 30;
  Result r = RunCli({"bench-serve", "--url", server.Url(), "--rate", "40", "--requests", std::to_string(n), "--seed",
                  "3", "--warmup", "2", "--json", js, "--trace-out", trace, "--plots", plots});
  ASSERT_EQ(r.code, 0) << r.Describe() << server.Log();
  const json j = json::parse(Slurp(js));
  ASSERT_EQ(j["runs"].size(), 1u);
  CheckRun(j["runs"][0], n);
  // The bundled model is 95% right at threshold 0.9; under load the threshold may fall.
  EXPECT_GE(j["runs"][0]["summary"]["completed"].get<int>(), n - 2) << r.Describe();
  EXPECT_GE(j["runs"][0]["summary"]["accuracy"].get<double>(), 0.6) << r.Describe();
  // The scheduler's overhead came from /metrics.
  const json& o = j["runs"][0]["overhead"];
  ASSERT_TRUE(o["valid"].get<bool>()) << o.dump();
  EXPECT_GT(o["batches"].get<double>(), 0);
  EXPECT_GE(o["overhead"].get<double>(), 0);
  // The table and the progress.
  EXPECT_THAT(r.out, HasSubstr("attain"));
  EXPECT_THAT(r.out, HasSubstr("Scheduler overhead"));
  EXPECT_THAT(r.err, HasSubstr("[server @ 40.00] 30 requests, attainment"));
  // SLOs = 10 x the latency alone measured on the server (solo requests before the run).
  EXPECT_EQ(j["slo"]["basis"], "live");
  EXPECT_GT(j["slo"]["live_factor"].get<double>(), 0);
  EXPECT_GT(j["slo"]["latency_alone_mean_ms"].get<double>(), 0);
  EXPECT_THAT(r.out, HasSubstr("measured on the server"));
  // What was sent, as a simulator trace: one row per request.
  std::ifstream t(trace);
  int rows = 0;
  for (std::string line; std::getline(t, line);) rows += !line.empty();
  EXPECT_EQ(rows, n + 1);  // and the header
  // The timeline in the simulator's columns (PNG when gnuplot is installed).
  const std::string csv = Slurp(plots + "/server_r40.00/timeline.csv");
  EXPECT_THAT(csv, HasSubstr("t_s,arrival_rps,active,queued"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(plots + "/server_r40.00/timeline.png"));
  }

  // The same seed gives the same arrivals and prompts.
  const std::string js2 = d.File("again.json");
  r = RunCli({"bench-serve", "--url", server.Url(), "--rate", "40", "--requests", "5", "--seed", "3", "--warmup", "0",
           "--quiet", "--slo-basis", "profile", "--json", js2});
  ASSERT_EQ(r.code, 0) << r.Describe();
  const json j2 = json::parse(Slurp(js2));
  // --slo-basis profile: the profile's latency alone as it is, so the SLOs are the first
  // run's over its measured factor.
  EXPECT_EQ(j2["slo"]["basis"], "profile");
  EXPECT_EQ(j2["slo"]["live_factor"].get<double>(), 1.0);
  const double factor = j["slo"]["live_factor"].get<double>();
  for (size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(j2["runs"][0]["requests"][i]["slo_s"].get<double>() * factor,
                j["runs"][0]["requests"][i]["slo_s"].get<double>(), 1e-9);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(j2["runs"][0]["requests"][i]["planned_s"], j["runs"][0]["requests"][i]["planned_s"]);
    EXPECT_EQ(j2["runs"][0]["requests"][i]["problem"], j["runs"][0]["requests"][i]["problem"]);
  }
}

TEST(BenchServeTest, ComparesPoliciesOnIdenticalArrivals) {
  tediserve::TempDir d("tedi_bench_serve");
  const std::string js = d.File("cmp.json");
  const int n = 16;
  Result r = RunCli({"bench-serve", "--policies", "tediserve,infaas", "--rate", "30", "--requests", std::to_string(n),
                     "--layout", "1,1", "--cores", "0,0", "--warmup", "2", "--repeat", "2", "--json", js});
  ASSERT_EQ(r.code, 0) << r.Describe();
  const json j = json::parse(Slurp(js));
  // Rounds outermost, policies interleaved within each, each round starting one policy later.
  ASSERT_EQ(j["runs"].size(), 4u);
  const std::vector<std::pair<std::string, int>> order = {{"tediserve", 1}, {"infaas", 1}, {"infaas", 2}, {"tediserve", 2}};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(j["runs"][k]["policy"], order[k].first);
    EXPECT_EQ(j["runs"][k]["round"], order[k].second);
    CheckRun(j["runs"][k], n);
  }
  for (int i = 0; i < n; ++i)
    for (size_t k = 1; k < 4; ++k) {
      EXPECT_EQ(j["runs"][0]["requests"][i]["planned_s"], j["runs"][k]["requests"][i]["planned_s"]);
      EXPECT_EQ(j["runs"][0]["requests"][i]["problem"], j["runs"][k]["requests"][i]["problem"]);
      EXPECT_EQ(j["runs"][0]["requests"][i]["slo_s"], j["runs"][k]["requests"][i]["slo_s"]);
    }
  // The mean of each policy over its rounds.
  ASSERT_EQ(j["means"].size(), 2u);
  for (const json& m : j["means"]) {
    EXPECT_EQ(m["runs"], 2);
    EXPECT_EQ(m["requests"], 2 * n);
  }
  // One table row per run, and the means.
  EXPECT_THAT(r.out, HasSubstr("tediserve #2"));
  EXPECT_THAT(r.out, HasSubstr("infaas #1"));
  EXPECT_THAT(r.out, HasSubstr("Mean over 2 rounds"));
}

// --load-factor: the capacity is measured on the server first (a closed loop), and the rates
// are the given multiples of it.
TEST(BenchServeTest, LoadFactorsAreMultiplesOfTheMeasuredCapacity) {
  tediserve::TempDir d("tedi_bench_serve");
  const std::string js = d.File("lf.json");
  Result r = RunCli({"bench-serve", "--policies", "tediserve", "--load-factor", "0.25,0.5", "--requests", "6",
                     "--layout", "1", "--cores", "0", "--warmup", "1", "--capacity-seconds", "3",
                     "--capacity-concurrency", "16", "--json", js});
  ASSERT_EQ(r.code, 0) << r.Describe();
  const json j = json::parse(Slurp(js));
  const double cap = j["capacity"]["rps"].get<double>();
  EXPECT_GT(cap, 1) << j["capacity"].dump();  // the tiny model answers far more than 1 request/s
  EXPECT_EQ(j["capacity"]["concurrency"], 16);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_NEAR(j["runs"][0]["rate"].get<double>(), 0.25 * cap, 1e-9);
  EXPECT_NEAR(j["runs"][1]["rate"].get<double>(), 0.5 * cap, 1e-9);
  for (const json& run : j["runs"]) CheckRun(run, 6);
  EXPECT_THAT(r.out, HasSubstr("the capacity measured on the server first"));
  EXPECT_THAT(r.err, HasSubstr("[capacity] 16 requests in flight"));
}

// --fidelity: the run is replayed by the simulator (engine in the loop) and live and simulated
// figures come side by side, with the overhead measured on solo probes.
TEST(BenchServeTest, FidelityReplaysTheRunInTheSimulator) {
  tediserve::TempDir d("tedi_bench_serve");
  const std::string js = d.File("fidelity.json");
  const int n = 20, probes = 5;
  Result r = RunCli({"bench-serve", "--fidelity", "--rate", "30", "--requests", std::to_string(n), "--layout", "1,1",
                     "--cores", "0,0", "--warmup", "2", "--fidelity-probes", std::to_string(probes), "--json", js});
  ASSERT_EQ(r.code, 0) << r.Describe();
  const json j = json::parse(Slurp(js));
  ASSERT_EQ(j["runs"].size(), 1u);
  const json& run = j["runs"][0];
  EXPECT_EQ(run["policy"], "tediserve");  // the default policy
  CheckRun(run, n);
  ASSERT_TRUE(run.contains("fidelity")) << run.dump().substr(0, 2000);
  const json& f = run["fidelity"];
  // Every planned request was simulated, and every probe sent.
  EXPECT_EQ(f["simulated"]["requests"].get<int>(), n);
  EXPECT_EQ(f["simulated"]["completed"].get<int>(), n);
  EXPECT_EQ(f["live"]["requests"].get<int>(), n);
  ASSERT_EQ(f["probe_requests"].size(), static_cast<size_t>(probes));
  EXPECT_GE(f["overhead"]["probes"].get<int>(), 1);
  EXPECT_LE(f["overhead"]["probes"].get<int>(), probes);
  EXPECT_GT(f["overhead"]["probe_simulated_ms"].get<double>(), 0);
  EXPECT_GE(f["overhead"]["per_request_ms"].get<double>(), 0);
  for (const char* side : {"simulated", "simulated_profile_only"}) {
    EXPECT_GE(f[side]["attainment"].get<double>(), 0) << side;
    EXPECT_LE(f[side]["attainment"].get<double>(), 1) << side;
    EXPECT_GT(f[side]["latency_mean_ms"].get<double>(), 0) << side;
  }
  // The overhead only adds time.
  EXPECT_GE(f["simulated"]["latency_mean_ms"].get<double>() + 1e-9,
            f["simulated_profile_only"]["latency_mean_ms"].get<double>() +
                std::min(0.0, f["overhead"]["per_step_ms"].get<double>()) * 8);
  // The same prompts through the same engine at a light load: the same answers, nearly.
  EXPECT_NEAR(f["simulated"]["accuracy"].get<double>(), f["live"]["accuracy"].get<double>(), 0.1) << f.dump();
  const double diff = f["attainment_diff_points"].get<double>();
  EXPECT_NEAR(diff, 100 * (f["simulated"]["attainment"].get<double>() - f["live"]["attainment"].get<double>()), 1e-6);
  // The step times by size came from the server, and the replay used them: a ratio by size,
  // the simpler replays beside it, and one simulated request per planned one.
  ASSERT_TRUE(run["overhead"]["step_sizes"].is_array());
  double batches = 0;
  for (const json& c : run["overhead"]["step_sizes"]) {
    batches += c["batches"].get<double>();
    EXPECT_GT(c["elapsed_s"].get<double>(), 0) << c.dump();
    EXPECT_GT(c["ratio_squares"].get<double>(), 0) << c.dump();
  }
  EXPECT_NEAR(batches, run["overhead"]["batches"].get<double>(), 0.5);
  EXPECT_GT(f["overhead"]["step_scale"].get<double>(), 0);
  EXPECT_TRUE(f["overhead"]["step_level"].is_array());
  EXPECT_TRUE(f["alternatives"].contains("one_ratio")) << f["alternatives"].dump();
  EXPECT_TRUE(f["alternatives"].contains("no_level")) << f["alternatives"].dump();
  ASSERT_EQ(f["simulated_requests"].size(), static_cast<size_t>(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) EXPECT_EQ(f["simulated_requests"][i]["id"].get<int>(), i);
  EXPECT_THAT(r.out, HasSubstr("Fidelity: the simulator on the same arrivals"));
  EXPECT_THAT(r.err, HasSubstr("[tediserve @ 30.00] simulated: attainment"));
}

TEST(BenchServeTest, BadFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"bench-serve", "--requests", "5"}, "--rate is required"},
      {{"bench-serve", "--rate", "-1", "--requests", "5"}, "--rate"},
      {{"bench-serve", "--rate", "2"}, "exactly one of --requests and --duration"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--duration", "3"}, "exactly one of --requests and --duration"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--arrivals", "weibull"}, "--arrivals"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--cv", "2"}, "--cv applies to --arrivals gamma"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--url", "ftp://x"}, "must start with http://"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--url", "http://127.0.0.1:99999"}, "bad port"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--policies", "nosuch"}, "unknown policy"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--policies", "infaas", "--url", "http://127.0.0.1:1"},
       "exclude each other"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--layout", "1,1"}, "only with --policies"},
      {{"bench-serve", "--trace", "/nonexistent/t.csv"}, "t.csv"},
      {{"bench-serve", "--trace", "/nonexistent/t.csv", "--rate", "3"}, "--rate"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--model", "/nonexistent"}, "--model"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--slo-ms", "10", "--slo-scale", "3"}, "one of --slo-ms"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--slo-basis", "guess"}, "--slo-basis"},
      {{"bench-serve", "--rate", "2", "--load-factor", "1.5", "--requests", "5"}, "one of --rate and --load-factor"},
      {{"bench-serve", "--load-factor", "0", "--requests", "5"}, "--load-factor"},
      {{"bench-serve", "--load-factor", "1.5", "--trace", "t.csv"}, "--load-factor applies to --arrivals poisson"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--capacity-seconds", "3"}, "apply to --load-factor"},
      {{"bench-serve", "--load-factor", "1", "--requests", "5", "--capacity-seconds", "1"}, "--capacity-seconds"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--slo-basis", "live", "--slo-ms", "10"}, "apply to --slo-scale"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--slo-basis", "profile", "--slo-probes", "3"},
       "--slo-probes applies to --slo-basis live"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--slo-probes", "0"}, "--slo-probes"},
      {{"bench-serve", "--rate", "2", "--requests", "0"}, "--requests"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--connections", "0"}, "--connections"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--frobnicate"}, "frobnicate"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity", "--url", "http://127.0.0.1:1"},
       "--fidelity starts its own servers"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity-probes", "3"}, "applies only with --fidelity"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity-draws", "3"}, "applies only with --fidelity"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity", "--fidelity-draws", "0"}, "--fidelity-draws"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity", "--fidelity-probes", "0"}, "--fidelity-probes"},
      {{"bench-serve", "--rate", "2", "--requests", "5", "--fidelity", "--serve-arg", "--profile", "--serve-arg", "x.csv"},
       "give --profile to bench-serve itself"},
  };
  for (const auto& c : cases) {
    Result r = RunCli(c.args, 60);
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.Describe();
    EXPECT_THAT(r.err, HasSubstr(c.message)) << cmd;
  }
  // Nobody listening: a clear failure (exit 1), not a run of transport errors.
  Result r = RunCli({"bench-serve", "--rate", "2", "--requests", "5", "--url", "http://127.0.0.1:1"}, 60);
  EXPECT_EQ(r.code, 1) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("cannot reach http://127.0.0.1:1"));
}

}  // namespace
