// `tediserve serve --reconfigure` end to end (issue 15, docs/design.md section 10.6): the real
// server and its worker processes on 127.0.0.1 over two cores, a load that steps low, high,
// low, and the server changing its layout by itself (2 x TP1 -> 1 x TP2 -> 2 x TP1 -> 1 x TP2)
// while every request is answered.
//
// The latency profile is a synthetic one written by the test, shaped like the GPU profiles
// the planner is meant for: a TP-2 instance runs a step in 0.7 of a TP-1's time (lower
// latency), so two TP-1 instances have more throughput (2 / 1 against 1 / 0.7). With it the
// planner prefers 1 x TP2 below about 9 requests per second of this workload and 2 x TP1
// above (checked with `tediserve plan`). The bundled model's measured CPU profile
// (data/profiles/tiny-llada-cpu.csv) has TP-2 slower than TP-1 at nearly every size, so with
// it the planner would rightly never pick TP-2 here: this test exercises the control loop
// (monitor -> planner -> layout change -> nothing lost), not a performance claim.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The synthetic profile: l_1(n) = 40 + 4n ms, l_2(n) = 0.7 l_1(n).
std::string SyntheticProfile() {
  std::string csv = "num_batched_tokens,tp1_ms,tp2_ms\n";
  for (int n = 8; n <= 8192; n *= 2) {
    const double t1 = 40 + 4.0 * n;
    char row[96];
    std::snprintf(row, sizeof row, "%d,%.3f,%.3f\n", n, t1, 0.7 * t1);
    csv += row;
  }
  return csv;
}

// A `tediserve serve` child process with its own temp folder; SIGTERM (then SIGKILL) at the end.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& flags) {
    dir_ = fs::temp_directory_path() / ("tedi_reconfigure_test_" + std::to_string(getpid()) + "_" + std::to_string(count_++));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "profile.csv") << SyntheticProfile();
    std::vector<std::string> args = {TEDISERVE_BIN, "serve", "--port", "0", "--port-file", (dir_ / "port").string(),
                                     "--model", std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada"};
    for (const std::string& f : flags) args.push_back(f == "@PROFILE" ? (dir_ / "profile.csv").string() : f);
    const std::string log = (dir_ / "serve.log").string();
    pid_ = fork();
    if (pid_ == 0) {
      if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
      dup2(2, 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      if (!WaitExit(15)) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Waits until the server listens (its port file), or it exits; true when listening.
  bool WaitListening(double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (WaitExit(0)) return false;
      std::ifstream f(dir_ / "port");
      if (f >> port_ && port_ > 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  bool WaitExit(double seconds) {
    if (pid_ <= 0) return true;
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    do {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (Clock::now() < until);
    return false;
  }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string Log() const { return Slurp(dir_ / "serve.log"); }

 private:
  static inline int count_ = 0;
  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = 0;
};

// Open-loop load: one request every 1/rate seconds, each on its own thread and connection,
// answers counted by HTTP status.
class Load {
 public:
  explicit Load(int port) : port_(port) {
    std::ifstream in(std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada/heldout.jsonl");
    for (std::string line; std::getline(in, line) && prompts_.size() < 64;) prompts_.push_back(json::parse(line)["prompt"]);
  }
  ~Load() { Join(); }
  // Sends at `rate` requests per second for at least `min_s` seconds, then until `done` says
  // stop or `max_s` passed; returns whether `done` held at the end.
  template <typename Done>
  bool RunUntil(double rate, double min_s, double max_s, Done done) {
    const auto start = Clock::now();
    auto next = start;
    int sent = 0;
    while (Clock::now() - start < std::chrono::duration<double>(max_s)) {
      std::this_thread::sleep_until(next);
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
      Send();
      const bool check = ++sent % std::max(1, static_cast<int>(rate / 2)) == 0;  // about twice a second
      if (check && Clock::now() - start >= std::chrono::duration<double>(min_s) && done()) return true;
    }
    return done();
  }
  void Join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }
  std::map<int, int> codes() {
    std::lock_guard<std::mutex> l(mu_);
    return codes_;
  }
  int sent() const { return sent_; }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> l(mu_);
    return failures_;
  }

 private:
  void Send() {
    const std::string prompt = prompts_[static_cast<size_t>(sent_) % prompts_.size()];
    ++sent_;
    threads_.emplace_back([this, prompt] {
      httplib::Client c("127.0.0.1", port_);
      c.set_read_timeout(60, 0);
      c.set_connection_timeout(10, 0);
      const json body = {{"model", "tiny-llada"}, {"prompt", prompt}, {"max_tokens", 8}, {"slo_ms", 600}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      std::lock_guard<std::mutex> l(mu_);
      const int code = r ? r->status : -1;
      ++codes_[code];
      if (code != 200) failures_.push_back(std::to_string(code) + ": " + (r ? r->body.substr(0, 300) : httplib::to_string(r.error())));
    });
  }
  int port_;
  std::vector<std::string> prompts_;
  std::vector<std::thread> threads_;
  std::atomic<int> sent_{0};
  std::mutex mu_;
  std::map<int, int> codes_;
  std::vector<std::string> failures_;
};

// The TP degrees of the instances now up, sorted, or empty while any instance is not up.
std::vector<int> UpLayout(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto r = c.Get("/admin/layout");
  if (!r || r->status != 200) return {};
  const json j = json::parse(r->body);
  std::vector<int> out;
  for (const json& i : j["instances"]) {
    if (i["state"] != "up") return {};
    out.push_back(i["tp"].get<int>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

double MetricValue(const std::string& metrics, const std::string& sample) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(sample + " ", 0) == 0) return std::stod(line.substr(sample.size() + 1));
  return -1;
}

TEST(ReconfigureTest, LoadStepsMoveTheLayoutByItselfAndLoseNothing) {
  ServerProcess server({"--layout", "1,1", "--cores", "0,1", "--profile", "@PROFILE", "--reconfigure",
                        "--reconfigure-period", "1", "--reconfigure-window", "3", "--reconfigure-tp", "1,2",
                        "--reconfigure-prompt-round", "16"});
  ASSERT_TRUE(server.WaitListening(60)) << server.Log();
  const int port = server.port();
  ASSERT_EQ(UpLayout(port), (std::vector<int>{1, 1}));
  const std::vector<int> tp2 = {2}, two_tp1 = {1, 1};
  Load load(port);
  // Each phase lasts at least 6 s (the window is 3 s, a decision every second), so the layout
  // must also hold once reached. Low load (2 req/s): the planner prefers the faster 1 x TP2.
  EXPECT_TRUE(load.RunUntil(2, 6, 30, [&] { return UpLayout(port) == tp2; }))
      << "no move to 1 x TP2 at low load\n" << server.Log();
  // High load (20 req/s): 1 x TP2 cannot keep up in the model; back to 2 x TP1.
  EXPECT_TRUE(load.RunUntil(20, 6, 30, [&] { return UpLayout(port) == two_tp1; }))
      << "no move to 2 x TP1 at high load\n" << server.Log();
  // Low again.
  EXPECT_TRUE(load.RunUntil(2, 6, 30, [&] { return UpLayout(port) == tp2; })) << "no move back to 1 x TP2\n" << server.Log();
  load.Join();

  // Every request answered, none lost to the moves.
  const std::map<int, int> codes = load.codes();
  EXPECT_EQ(codes.size(), 1u) << server.Log();
  EXPECT_EQ(codes.count(200) ? codes.at(200) : 0, load.sent());
  for (const std::string& f : load.failures()) ADD_FAILURE() << f;
  EXPECT_GE(load.sent(), 6 * 2 + 6 * 20 + 6 * 2);

  httplib::Client c("127.0.0.1", port);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_GE(MetricValue(m->body, "tediserve_reconfig_decisions_total{result=\"change\"}"), 3) << m->body;
  EXPECT_EQ(MetricValue(m->body, "tediserve_reconfig_decisions_total{result=\"error\"}"), -1) << "no error decisions";
  // The server's own count: every request left completed (or cut at its end of text), none
  // failed or rejected.
  double left = 0;
  for (const char* outcome : {"completed", "cancelled", "failed", "rejected", "aborted"})
    left += std::max(0.0, MetricValue(m->body, std::string("tediserve_requests_total{outcome=\"") + outcome + "\"}"));
  EXPECT_EQ(left, load.sent()) << m->body;
  EXPECT_EQ(MetricValue(m->body, "tediserve_requests_total{outcome=\"failed\"}"), -1) << m->body;
  EXPECT_EQ(MetricValue(m->body, "tediserve_requests_total{outcome=\"rejected\"}"), -1) << m->body;
  EXPECT_EQ(MetricValue(m->body, "tediserve_requests_total{outcome=\"aborted\"}"), -1) << m->body;
  EXPECT_EQ(MetricValue(m->body, "tediserve_instances{tp=\"2\",state=\"up\"}"), 1);
  EXPECT_EQ(MetricValue(m->body, "tediserve_instances{tp=\"1\",state=\"up\"}"), 0);
  EXPECT_EQ(MetricValue(m->body, "tediserve_reconfig_chosen_instances{tp=\"2\"}"), 1);
  const std::string log = server.Log();
  EXPECT_NE(log.find("change (same threshold, materially more SLO slack)"), std::string::npos) << log;
}

// The direct children of a process.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; f >> c;) out.push_back(c);
  return out;
}

// A layout change leaves requests queued for a while (no instance up between a drain and a
// start). A non-streaming request whose first step came more than a second after it arrived
// used to be cut before it ran: the HTTP thread's wait timed out, the empty view read as a
// finished empty text, the request was cancelled and answered 499 "cancelled by the client"
// (seen in the test above, about one run in five). Here the wait is made certain: the only
// worker is stopped (SIGSTOP) for 2.5 s while a request waits for it.
TEST(ReconfigureTest, ARequestQueuedForSecondsIsAnsweredNotCut) {
  ServerProcess server({"--layout", "1", "--cores", "0"});
  ASSERT_TRUE(server.WaitListening(60)) << server.Log();
  std::vector<pid_t> workers;
  for (pid_t agent : ChildrenOf(server.pid()))
    for (pid_t w : ChildrenOf(agent)) workers.push_back(w);
  ASSERT_EQ(workers.size(), 1u) << "expected one worker under the local agent";
  ASSERT_EQ(kill(workers[0], SIGSTOP), 0);
  int status = 0;
  std::string body, error;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(60, 0);
    const json req = {{"model", "tiny-llada"}, {"prompt", "68+67="}, {"max_tokens", 8}};
    auto r = c.Post("/v1/completions", req.dump(), "application/json");
    if (r) {
      status = r->status;
      body = r->body;
    } else {
      error = httplib::to_string(r.error());
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  kill(workers[0], SIGCONT);
  client.join();
  ASSERT_EQ(status, 200) << body << error;
  EXPECT_EQ(json::parse(body)["choices"][0]["text"], "135") << body;
}

TEST(ReconfigureTest, BadFlagsAreRefusedAtStart) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--reconfigure-period", "5"}, "--reconfigure"},  // needs --reconfigure
      {{"--reconfigure", "--reconfigure-period", "0"}, "--reconfigure-period"},
      {{"--reconfigure", "--reconfigure-tp", "1,x"}, "--reconfigure-tp"},
      {{"--reconfigure", "--profile", "@PROFILE", "--reconfigure-tp", "1,4"}, "has no TP-4 column"},
      {{"--reconfigure", "--profile", "@PROFILE", "--reconfigure-output-round", "12"}, "not a multiple of the block size 8"},
  };
  for (const Case& k : cases) {
    std::vector<std::string> flags = {"--layout", "1", "--cores", "0"};
    flags.insert(flags.end(), k.flags.begin(), k.flags.end());
    ServerProcess server(flags);
    EXPECT_FALSE(server.WaitListening(60)) << "started with " << k.flags.back();
    ASSERT_TRUE(server.WaitExit(30));
    EXPECT_EQ(server.exit_code(), 2) << server.Log();
    EXPECT_NE(server.Log().find(k.message), std::string::npos) << server.Log();
  }
}

}  // namespace
