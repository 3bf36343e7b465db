// `tediserve serve` end to end: the real server process with its real worker processes on
// 127.0.0.1, driven over HTTP. Answers are graded against the bundled model's held-out set.
#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Problem {
  std::string prompt, answer;
};

std::vector<Problem> Heldout(size_t n, const std::string& model = "tiny-llada") {
  std::ifstream in(std::string(TEDI_SOURCE_DIR) + "/models/" + model + "/heldout.jsonl");
  std::vector<Problem> out;
  std::string line;
  while (out.size() < n && std::getline(in, line)) {
    auto j = json::parse(line);
    out.push_back({j["prompt"], j["answer"]});
  }
  return out;
}

// Starts `args` with stderr (and stdout) going to `log`.
pid_t Spawn(std::vector<std::string> args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stderr);
    dup2(2, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The direct children of a process.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; f >> c;) out.push_back(c);
  return out;
}

// A loopback port nobody listens on now (bound to port 0 and closed again).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

// One server process on a free loopback port, stopped (SIGTERM, then SIGKILL) at the end.
// `while_starting` runs once the process is started, before waiting for it to listen.
class Server {
 public:
  explicit Server(std::vector<std::string> extra = {}, std::vector<std::string> base = {"--layout", "1,1", "--cores", "0,0"},
                  const std::function<void()>& while_starting = {}) {
    dir_ = fs::temp_directory_path() / ("tedi_serve_test_" + std::to_string(getpid()) + "_" + std::to_string(n_++));
    fs::create_directories(dir_);
    const std::string port_file = (dir_ / "port").string();
    std::vector<std::string> args = {TEDISERVE_BIN, "serve", "--port", "0", "--port-file", port_file};
    args.insert(args.end(), base.begin(), base.end());
    args.insert(args.end(), extra.begin(), extra.end());
    // The tiny model (one block: fast) unless the test names a model or asks for the default.
    if (std::find(args.begin(), args.end(), "--model") == args.end() &&
        std::find(args.begin(), args.end(), "@DEFAULT_MODEL") == args.end())
      args.insert(args.end(), {"--model", std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada"});
    args.erase(std::remove(args.begin(), args.end(), "@DEFAULT_MODEL"), args.end());
    pid_ = Spawn(args, (dir_ / "serve.log").string());
    if (while_starting) while_starting();
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (waitpid(pid_, &exit_status_, WNOHANG) == pid_) {  // it failed to start
        pid_ = -1;
        break;
      }
      std::ifstream f(port_file);
      f >> port_;
    }
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      if (!WaitExit(10)) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    fs::remove_all(dir_);
  }
  // Waits up to `s` seconds for the process to exit; its exit status in *status.
  bool WaitExit(double s, int* status = nullptr) {
    if (pid_ <= 0) {
      if (status) *status = exit_status_;
      return true;
    }
    for (int i = 0; i < s * 50; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = st;
        if (status) *status = st;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  std::string Log() const {
    std::ifstream f(dir_ / "serve.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const fs::path& dir() const { return dir_; }

 private:
  static inline int n_ = 0;
  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
};

// One sample's value in a Prometheus text body (`key` with its labels), or `absent`.
double MetricIn(const std::string& body, const std::string& key, double absent = -1) {
  const size_t at = body.find("\n" + key + " ");
  return at == std::string::npos ? absent : std::atof(body.c_str() + at + key.size() + 2);
}

json Post(const Server& s, const std::string& path, const json& body, int* status = nullptr) {
  auto c = s.Client();
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) return json{{"transport_error", static_cast<int>(r.error())}};
  if (status) *status = r->status;
  return json::parse(r->body, nullptr, false);
}

TEST(ServeTest, AnswersHeldOutProblemsOverCompletionsAndChat) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  auto c = s.Client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny-llada");

  int correct = 0, n = 0;
  for (const auto& p : Heldout(30)) {
    int status = 0;
    // A loose SLO: the policy keeps the top threshold, so answers are the model's best.
    const bool chat = n % 2 == 1;
    json body = {{"slo_ms", 10000}};
    if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
    else body["prompt"] = p.prompt;
    json r = Post(s, chat ? "/v1/chat/completions" : "/v1/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    const std::string text = chat ? r["choices"][0]["message"]["content"] : r["choices"][0]["text"];
    correct += text == p.answer;
    ++n;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_GE(r["tediserve"]["steps"].get<int>(), 1);
    EXPECT_TRUE(r["tediserve"]["slo_met"].get<bool>());
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), static_cast<int>(text.size()));
  }
  // The model's held-out accuracy at threshold 0.9 is 0.95 (docs); 30 problems.
  EXPECT_GE(correct, 25) << correct << " of " << n;
}

// `serve` without --model serves the bundled multi-block model: 64 positions in 8 blocks of
// 8, so every request runs at least 8 steps; its answers are graded against its held-out set.
TEST(ServeTest, ServesTheMultiBlockModelByDefault) {
  Server s({"@DEFAULT_MODEL"});
  ASSERT_GT(s.port(), 0) << s.Log();
  auto models = s.Client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny-llada-long");
  int correct = 0, n = 0;
  for (const auto& p : Heldout(20, "tiny-llada-long")) {
    int status = 0;
    json r = Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 20000}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    correct += r["choices"][0]["text"] == p.answer;
    ++n;
    EXPECT_GE(r["tediserve"]["steps"].get<int>(), 8) << r.dump();
    EXPECT_EQ(r["tediserve"]["thresholds"].size(), r["tediserve"]["steps"].get<size_t>());
  }
  // 0.927 at threshold 0.9 on its 400 held-out problems (README).
  EXPECT_GE(correct, 16) << correct << " of " << n;
}

// A non-streaming request with a stop sequence is answered with the text before it (its
// handler follows every step; one without stops wakes only once the text is final).
TEST(ServeTest, NonStreamingStopSequenceCutsTheText) {
  Server s({"@DEFAULT_MODEL"});
  ASSERT_GT(s.port(), 0) << s.Log();
  int tried = 0;
  for (const auto& p : Heldout(12, "tiny-llada-long")) {
    int status = 0;
    const json full = Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 20000}}, &status);
    ASSERT_EQ(status, 200) << full.dump();
    const std::string text = full["choices"][0]["text"];
    if (text.size() < 2) continue;
    const std::string stop = text.substr(1, 1);
    const std::string want = text.substr(0, text.find(stop));
    const json r = Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 20000}, {"stop", {stop}}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["text"], want) << text << " stopped at " << stop;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), static_cast<int>(want.size()));
    ++tried;
  }
  EXPECT_GE(tried, 4);
}

// A worker told to run several steps per batch (--batch-steps) decodes exactly what it does
// one step at a time: one request at a time at the fixed threshold, the same text, steps and
// thresholds, in about a quarter of the batches.
TEST(ServeTest, BatchesOfSeveralStepsDecodeTheSameAnswers) {
  std::vector<json> answers[2];
  double batches[2] = {0, 0}, steps[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Server s({"@DEFAULT_MODEL", "--policy", "fixed", "--batch-steps", k == 0 ? "1" : "4"}, {"--layout", "1", "--cores", "0"});
    ASSERT_GT(s.port(), 0) << s.Log();
    for (const auto& p : Heldout(6, "tiny-llada-long")) {
      int status = 0;
      json r = Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 20000}}, &status);
      ASSERT_EQ(status, 200) << r.dump();
      answers[k].push_back(r);
    }
    auto m = s.Client().Get("/metrics");
    ASSERT_TRUE(m);
    batches[k] = MetricIn(m->body, "tediserve_batch_requests_count");
    steps[k] = MetricIn(m->body, "tediserve_request_steps_total");
  }
  for (size_t i = 0; i < answers[0].size(); ++i) {
    EXPECT_EQ(answers[1][i]["choices"][0]["text"], answers[0][i]["choices"][0]["text"]) << i;
    EXPECT_EQ(answers[1][i]["tediserve"]["steps"], answers[0][i]["tediserve"]["steps"]) << i;
    EXPECT_EQ(answers[1][i]["tediserve"]["thresholds"], answers[0][i]["tediserve"]["thresholds"]) << i;
    EXPECT_GE(answers[1][i]["tediserve"]["steps"].get<int>(), 8);
  }
  EXPECT_EQ(steps[1], steps[0]);
  EXPECT_EQ(batches[0], steps[0]);
  EXPECT_LT(batches[1], 0.3 * steps[1]) << batches[1] << " batches for " << steps[1] << " steps";
}

TEST(ServeTest, StreamsTheSameTextWithUsageAndDone) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  const auto p = Heldout(3)[2];
  json plain = Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 10000}});
  std::string sse;
  auto c = s.Client();
  json body = {{"prompt", p.prompt}, {"slo_ms", 10000}, {"stream", true}, {"stream_canvas", true},
               {"stream_options", {{"include_usage", true}}}};
  auto r = c.Post("/v1/completions", httplib::Headers{}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  std::string text;
  bool done = false, usage = false, finish = false, canvas = false;
  int canvases = 0, steps = -1;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "event: canvas") canvas = true;
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string d = line.substr(6);
    if (d == "[DONE]") {
      done = true;
      continue;
    }
    json j = json::parse(d);
    if (j["object"] == "tediserve.canvas") {
      ++canvases;
      continue;
    }
    if (j.contains("usage")) {
      usage = true;
      steps = j["tediserve"]["steps"].get<int>();
      EXPECT_EQ(j["usage"]["completion_tokens"].get<int>(), static_cast<int>(text.size()));
      continue;
    }
    text += j["choices"][0]["text"].get<std::string>();
    finish = finish || j["choices"][0]["finish_reason"] == "stop";
  }
  EXPECT_TRUE(done && usage && finish && canvas) << r->body;
  // One canvas per step, even when the request finished before the stream's first look.
  EXPECT_EQ(canvases, steps) << r->body;
  EXPECT_EQ(text, plain["choices"][0]["text"].get<std::string>());
}

TEST(ServeTest, BadInputGetsA4xxAndTheServerStaysUp) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  auto c = s.Client();
  struct Case {
    std::string body;
    int status;
  };
  const std::vector<Case> cases = {
      {"{not json", 400},
      {R"({"prompt": 5})", 400},
      {R"({"prompt": "1+1=", "model": "nope"})", 404},
      {R"({"prompt": "1+1=", "max_tokens": -3})", 400},
      {R"({"prompt": "1+1=", "max_tokens": 100000000})", 400},
      {R"({"prompt": "1+1=", "slo_ms": -1})", 400},
      {R"({"prompt": "1+1=", "min_threshold": 2})", 400},
      {R"({"prompt": "1+1=", "logprobs": 2})", 400},
      {R"({"prompt": "1+1=", "n": 2})", 400},
      {"{\"prompt\": \"" + std::string(2 << 20, '1') + "\"}", 413},
      {"{\"prompt\": \"" + std::string(100000, '1') + "\"}", 400},
  };
  for (const auto& k : cases) {
    auto r = c.Post("/v1/completions", k.body, "application/json");
    ASSERT_TRUE(r) << k.body.substr(0, 80);
    EXPECT_EQ(r->status, k.status) << k.body.substr(0, 80) << " -> " << r->body;
    json e = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(e.contains("error") && e["error"]["message"].is_string()) << r->body;
  }
  auto nf = c.Get("/v2/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  int status = 0;
  json ok = Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tediserve_http_errors_total{status=\"400\"}"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("tediserve_requests_total{outcome=\"completed\"} 1"), std::string::npos) << m->body;
}

TEST(ServeTest, ApiKeyIsRequiredWhenSet) {
  Server s({"--api-key", "sekret"});
  ASSERT_GT(s.port(), 0) << s.Log();
  int status = 0;
  json r = Post(s, "/v1/completions", {{"prompt", "48+39="}}, &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(r["error"]["code"], "invalid_api_key");
  auto c = s.Client();
  auto ok = c.Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer sekret"}},
                   R"({"prompt":"48+39=","slo_ms":10000})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// Sends every problem from 8 client threads (SLO 20 s) and runs `during` once a quarter of
// them are answered (so three quarters are still to come however fast the machine is);
// returns {answered with 200, anything else}.
std::pair<int, int> SendWhile(const Server& s, const std::vector<Problem>& problems,
                              const std::function<void(int answered)>& during) {
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t)
    clients.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < problems.size(); i += 8) {
        int status = 0;
        Post(s, "/v1/completions", {{"prompt", problems[i].prompt}, {"slo_ms", 20000}}, &status);
        (status == 200 ? ok : bad)++;
      }
    });
  const int quarter = static_cast<int>(problems.size() / 4);
  for (int i = 0; i < 3000 && ok.load() + bad.load() < quarter; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  during(ok.load() + bad.load());
  for (auto& c : clients) c.join();
  return {ok.load(), bad.load()};
}

// kill -9 of a worker under load: every request completes (its steps resume on the other
// worker or on the restarted one), the failure is counted.
TEST(ServeTest, KilledWorkerLosesNoRequest) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  // Kill one worker (a child of the server's local agent) while requests run.
  size_t agents = 0, workers = 0;
  int answered_at_kill = -1;
  auto [ok, bad] = SendWhile(s, Heldout(40), [&](int answered) {
    answered_at_kill = answered;
    const std::vector<pid_t> a = ChildrenOf(s.pid());
    agents = a.size();
    if (agents != 1) return;
    const std::vector<pid_t> w = ChildrenOf(a[0]);
    workers = w.size();
    if (!w.empty()) kill(w[0], SIGKILL);
  });
  ASSERT_EQ(agents, 1u) << "the server should have one child, its local agent";
  ASSERT_EQ(workers, 2u) << "the agent should run two workers";
  EXPECT_LT(answered_at_kill, 30) << "the kill came after most requests were answered";
  EXPECT_EQ(ok, 40) << s.Log();
  EXPECT_EQ(bad, 0);
  // The loss is counted (the stream's end reaches the loop asynchronously: allow 5 s).
  std::optional<httplib::Result> m;
  for (int i = 0; i < 100; ++i) {
    m.emplace(s.Client().Get("/metrics"));
    if (*m && (*m)->body.find("tediserve_worker_failures_total 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(*m);
  EXPECT_NE((*m)->body.find("tediserve_worker_failures_total 1"), std::string::npos) << (*m)->body;
  // The server still answers.
  int status = 0;
  Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  EXPECT_EQ(status, 200);
}

// A worker that stops answering (SIGSTOP: its process and stream stay up, it reads nothing)
// under load: its batch times out after --step-timeout, the worker is replaced and every
// request completes elsewhere. Nothing the server does for the other worker waits on it
// (batches are written without blocking on a worker that stopped reading).
TEST(ServeTest, WorkerThatStopsAnsweringIsReplacedAndLosesNoRequest) {
  Server s({"--step-timeout", "1"});
  ASSERT_GT(s.port(), 0) << s.Log();
  pid_t stopped = -1;
  const auto t0 = std::chrono::steady_clock::now();
  auto [ok, bad] = SendWhile(s, Heldout(40), [&](int) {
    const std::vector<pid_t> a = ChildrenOf(s.pid());
    if (a.size() != 1) return;
    const std::vector<pid_t> w = ChildrenOf(a[0]);
    if (w.size() == 2 && kill(w[0], SIGSTOP) == 0) stopped = w[0];
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_GT(stopped, 0) << "no worker to stop";
  EXPECT_LT(took, 15) << "the requests waited for the default 30-s timeout, not --step-timeout";
  EXPECT_EQ(ok, 40) << s.Log();
  EXPECT_EQ(bad, 0);
  double failures = -1;
  for (int i = 0; i < 100 && failures < 1; ++i) {
    if (auto m = s.Client().Get("/metrics")) failures = MetricIn(m->body, "tediserve_worker_failures_total");
    if (failures < 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(failures, 1) << "the stopped worker was never declared lost\n" << s.Log();
  EXPECT_NE(s.Log().find("no answer within the step timeout"), std::string::npos) << s.Log();
  kill(stopped, SIGCONT);  // if the agent has not removed it yet
}

// Waits until /health reports `up` instances; returns its body.
json WaitHealthy(const Server& s, int up, double timeout_s) {
  json h;
  for (int i = 0; i < timeout_s * 20; ++i) {
    auto r = s.Client().Get("/health");
    if (r) h = json::parse(r->body, nullptr, false);
    if (h.is_object() && h.value("instances_up", -1) == up) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return h;
}

// kill -9 of the local agent takes its workers with it: the requests wait while the server
// starts a new agent and workers, then every one completes.
TEST(ServeTest, KilledAgentLosesNoRequest) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  std::vector<pid_t> agents;
  auto [ok, bad] = SendWhile(s, Heldout(40), [&](int) {
    agents = ChildrenOf(s.pid());
    if (agents.size() == 1) kill(agents[0], SIGKILL);
  });
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(ok, 40) << s.Log();
  EXPECT_EQ(bad, 0);
  json h = WaitHealthy(s, 2, 30);
  ASSERT_EQ(h.value("instances_up", -1), 2) << h.dump() << s.Log();
  ASSERT_EQ(h["agents"].size(), 1u);
  EXPECT_NE(h["agents"][0]["pid"].get<int64_t>(), agents[0]) << "a new local agent runs";
  auto m = s.Client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tediserve_worker_failures_total 2"), std::string::npos) << m->body;
}

// Several nodes on one machine: no local agent; two agents join the scheduler's address, their
// workers listening on two other loopback addresses. Killing one agent loses no request; the
// rest run on the other node, and the node rejoins when its agent comes back.
TEST(ServeTest, AgentsOnSeveralLoopbackAddressesJoinAndSurviveAKill) {
  setenv("TEDISERVE_CLUSTER_TOKEN", "serve-test-cluster-secret", 1);
  const std::string join = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<pid_t> agent_pids(2, -1);
  fs::path logs = fs::temp_directory_path() / ("tedi_agents_" + std::to_string(getpid()));
  fs::create_directories(logs);
  auto start_agent = [&](int k) {
    agent_pids[static_cast<size_t>(k)] =
        Spawn({TEDISERVE_BIN, "agent", "--join", join, "--node", k == 0 ? "node-a" : "node-b", "--cores", "0",
               "--worker-host", k == 0 ? "127.0.0.2" : "127.0.0.3", "--retry-seconds", "0.2"},
              (logs / ("agent" + std::to_string(k) + ".log")).string());
  };
  {
    Server s({"--no-local-agent", "--agent-listen", join, "--agent-wait", "60"}, {"--layout", "1,1"}, [&] {
      start_agent(0);
      start_agent(1);
    });
    ASSERT_GT(s.port(), 0) << s.Log();
    json h = WaitHealthy(s, 2, 10);
    ASSERT_EQ(h["agents"].size(), 2u) << h.dump();
    // A wrong token is refused with a clear error and a non-zero exit.
    {
      setenv("TEDISERVE_CLUSTER_TOKEN", "wrong", 1);
      const pid_t bad_agent = Spawn({TEDISERVE_BIN, "agent", "--join", join, "--node", "intruder", "--cores", "0"},
                                    (logs / "intruder.log").string());
      setenv("TEDISERVE_CLUSTER_TOKEN", "serve-test-cluster-secret", 1);
      int st = 0;
      waitpid(bad_agent, &st, 0);
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
      std::ifstream f(logs / "intruder.log");
      const std::string log((std::istreambuf_iterator<char>(f)), {});
      EXPECT_NE(log.find("cluster token"), std::string::npos) << log;
    }
    auto [ok, bad] = SendWhile(s, Heldout(40), [&](int) {
      kill(agent_pids[0], SIGKILL);
      waitpid(agent_pids[0], nullptr, 0);
    });
    EXPECT_EQ(ok, 40) << s.Log();
    EXPECT_EQ(bad, 0);
    h = WaitHealthy(s, 1, 10);
    EXPECT_EQ(h.value("instances_up", -1), 1) << h.dump();
    // node-a comes back: its instance starts again there.
    start_agent(0);
    h = WaitHealthy(s, 2, 30);
    EXPECT_EQ(h.value("instances_up", -1), 2) << h.dump() << s.Log();
    EXPECT_EQ(h["agents"].size(), 2u);
    int status = 0;
    Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
    EXPECT_EQ(status, 200);
  }
  for (pid_t p : agent_pids) {
    kill(p, SIGTERM);
    waitpid(p, nullptr, 0);
  }
  unsetenv("TEDISERVE_CLUSTER_TOKEN");
  fs::remove_all(logs);
}

// Runs a shell command; true when it exits 0.
bool Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// A CA and a certificate it signs for the loopback addresses the test dials (PEM files in
// `dir`: NAME-ca.pem, NAME.pem, NAME.key), made with the openssl command.
bool MakeCertificates(const fs::path& dir, const std::string& name) {
  const std::string d = dir.string() + "/" + name;
  {
    std::ofstream ext(d + ".ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    if (!ext) return false;
  }
  return Sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name + "-ca -keyout " + d + "-ca.key -out " +
            d + "-ca.pem") &&
         Sh("openssl req -newkey rsa:2048 -nodes -subj /CN=" + name + " -keyout " + d + ".key -out " + d + ".csr") &&
         Sh("openssl x509 -req -days 2 -in " + d + ".csr -CA " + d + "-ca.pem -CAkey " + d + "-ca.key -CAcreateserial -out " +
            d + ".pem -extfile " + d + ".ext");
}

// serve --tls-*: the scheduler, its local agent and the workers talk mutual TLS, and answer;
// an agent without TLS, or with a certificate of another CA, does not get in; half the TLS
// flags, or a file that is not PEM, are a clear error.
TEST(ServeTest, TlsLinksAdmitOnlyCertificatesOfTheCa) {
  const fs::path dir = fs::temp_directory_path() / ("tedi_tls_" + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(MakeCertificates(dir, "cluster") && MakeCertificates(dir, "rogue")) << "needs the openssl command";
  const std::string cert = (dir / "cluster.pem").string(), key = (dir / "cluster.key").string(),
                    ca = (dir / "cluster-ca.pem").string();
  const std::string join = "127.0.0.1:" + std::to_string(FreePort());
  setenv("TEDISERVE_CLUSTER_TOKEN", "serve-test-tls-secret", 1);
  {
    Server s({"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--agent-listen", join});
    ASSERT_GT(s.port(), 0) << s.Log();
    json h = WaitHealthy(s, 2, 30);
    ASSERT_EQ(h.value("instances_up", -1), 2) << h.dump() << s.Log();
    int status = 0;
    json r = Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
    EXPECT_EQ(status, 200) << r.dump();
    EXPECT_TRUE(r["choices"][0]["text"].is_string()) << r.dump();
    // Two agents that must not get in: one without TLS, one whose certificate another CA signed.
    const std::vector<std::vector<std::string>> intruders = {
        {TEDISERVE_BIN, "agent", "--join", join, "--node", "plain", "--cores", "0", "--retry-seconds", "0.2"},
        {TEDISERVE_BIN, "agent", "--join", join, "--node", "rogue", "--cores", "0", "--retry-seconds", "0.2",
         "--tls-cert", (dir / "rogue.pem").string(), "--tls-key", (dir / "rogue.key").string(), "--tls-ca", ca}};
    for (size_t k = 0; k < intruders.size(); ++k) {
      const std::string log = (dir / ("intruder" + std::to_string(k) + ".log")).string();
      const pid_t p = Spawn(intruders[k], log);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      auto res = s.Client().Get("/health");
      ASSERT_TRUE(res);
      h = json::parse(res->body, nullptr, false);
      EXPECT_EQ(h["agents"].size(), 1u) << intruders[k][5] << ": " << h.dump();
      kill(p, SIGTERM);
      waitpid(p, nullptr, 0);
      std::ifstream f(log);
      const std::string text((std::istreambuf_iterator<char>(f)), {});
      EXPECT_NE(text.find("cannot join"), std::string::npos) << intruders[k][5] << ": " << text;
      // The hint matches the agent's side: start with --tls-*, or check the certificates.
      EXPECT_NE(text.find(k == 0 ? "this agent needs them too" : "with TLS, the scheduler's certificate"),
                std::string::npos)
          << intruders[k][5] << ": " << text;
    }
    r = Post(s, "/v1/completions", {{"prompt", "12+30="}, {"slo_ms", 10000}}, &status);
    EXPECT_EQ(status, 200) << r.dump();
  }
  unsetenv("TEDISERVE_CLUSTER_TOKEN");
  for (std::vector<std::string> extra : {std::vector<std::string>{"--tls-cert", cert},
                                         std::vector<std::string>{"--tls-cert", cert, "--tls-key", key, "--tls-ca", key}}) {
    Server s(extra);
    int st = -1;
    ASSERT_TRUE(s.WaitExit(30, &st));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << s.Log();
    EXPECT_NE(s.Log().find("--tls-"), std::string::npos) << s.Log();
  }
  fs::remove_all(dir);
}

// The instances now in the layout (GET /admin/layout): "tp:state" of each, sorted.
std::vector<std::string> LayoutOf(const Server& s) {
  auto r = s.Client().Get("/admin/layout");
  std::vector<std::string> out;
  if (!r || r->status != 200) return {"unreachable"};
  const json body = json::parse(r->body);
  for (const json& i : body["instances"])
    out.push_back(std::to_string(i["tp"].get<int>()) + ":" + i["state"].get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

bool WaitLayout(const Server& s, const std::vector<std::string>& want, double timeout_s) {
  for (int i = 0; i < timeout_s * 20; ++i) {
    if (LayoutOf(s) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The admin call moves 2 x TP1 -> 1 x TP2 -> 2 x TP1 under load: the TP-1 instances drain
// (residents move at their next block boundary), the TP-2 one starts on their cores, and
// every request completes with a graded answer.
TEST(ServeTest, LayoutMovesUnderLoadLoseNothing) {
  Server s({}, {"--layout", "1,1", "--cores", "0,1"});
  ASSERT_GT(s.port(), 0) << s.Log();
  ASSERT_TRUE(WaitLayout(s, {"1:up", "1:up"}, 10)) << testing::PrintToString(LayoutOf(s)) << s.Log();
  auto problems = Heldout(200);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, bad{0}, correct{0}, sent{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t)
    clients.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); !stop && sent < 3000; i = (i + 6) % problems.size()) {
        ++sent;
        int status = 0;
        json r = Post(s, "/v1/completions", {{"prompt", problems[i].prompt}, {"slo_ms", 20000}, {"max_threshold", 0.9},
                                             {"min_threshold", 0.9}}, &status);
        if (status != 200) {
          ++bad;
          continue;
        }
        ++ok;
        correct += r["choices"][0]["text"].get<std::string>() == problems[i].answer;
      }
    });
  auto served_by_now = [&] { return ok.load(); };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  json change = Post(s, "/admin/layout", {{"layout", {2}}}, &status);
  EXPECT_EQ(status, 202) << change.dump();
  EXPECT_EQ(change["drain"].size(), 2u) << change.dump();
  EXPECT_EQ(change["launch"].size(), 1u) << change.dump();
  EXPECT_TRUE(WaitLayout(s, {"2:up"}, 30)) << s.Log();
  const int before_tp2 = served_by_now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(served_by_now(), before_tp2) << "nothing completed on the TP-2 instance";
  auto metrics = s.Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tediserve_instances{tp=\"2\",state=\"up\"} 1"), std::string::npos);
  change = Post(s, "/admin/layout", {{"layout", {1, 1}}}, &status);
  EXPECT_EQ(status, 202) << change.dump();
  EXPECT_TRUE(WaitLayout(s, {"1:up", "1:up"}, 30)) << s.Log();
  const int before_tp1 = served_by_now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(served_by_now(), before_tp1);
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(bad.load(), 0) << s.Log();
  EXPECT_EQ(ok.load(), sent.load());
  // Threshold 0.9 throughout: the tiny model's held-out accuracy there is about 0.95.
  EXPECT_GT(correct.load(), ok.load() * 0.85) << correct << " of " << ok;
  // A layout the agents cannot hold, and malformed ones, are 400s that change nothing.
  for (const json& body : {json{{"layout", {1, 1, 1}}}, json{{"layout", {4}}}, json{{"layout", json::array()}},
                           json{{"layout", {0}}}, json{{"layout", "2"}}, json{{"tp", {2}}}}) {
    json e = Post(s, "/admin/layout", body, &status);
    EXPECT_EQ(status, 400) << body.dump() << " -> " << e.dump();
    EXPECT_TRUE(e.contains("error")) << e.dump();
  }
  EXPECT_EQ(LayoutOf(s), (std::vector<std::string>{"1:up", "1:up"}));
}

// /tokenize and /detokenize (vLLM's shapes) round-trip with the model's tokenizer.
TEST(ServeTest, TokenizeAndDetokenizeEndpoints) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  int status = 0;
  json t = Post(s, "/tokenize", {{"prompt", "48+39="}}, &status);
  ASSERT_EQ(status, 200) << t.dump();
  EXPECT_EQ(t["count"].get<size_t>(), t["tokens"].size());
  EXPECT_EQ(t["tokens"].size(), 6u);
  json d = Post(s, "/detokenize", {{"tokens", t["tokens"]}}, &status);
  ASSERT_EQ(status, 200) << d.dump();
  EXPECT_EQ(d["prompt"], "48+39=");
  for (const json& body : {json{{"tokens", {-1}}}, json{{"tokens", {1 << 30}}}, json{{"tokens", "1"}},
                           json{{"prompt", 5}}, json{{"prompt", "x"}, {"extra", 1}}}) {
    const std::string path = body.contains("tokens") ? "/detokenize" : "/tokenize";
    json e = Post(s, path, body, &status);
    EXPECT_EQ(status, 400) << path << " " << body.dump() << " -> " << e.dump();
  }
  Post(s, "/tokenize", {{"prompt", "1"}, {"model", "gpt-4"}}, &status);
  EXPECT_EQ(status, 404);
}

// /metrics after real traffic passes `promtool check metrics` (Debian's prometheus package,
// installed by scripts/setup.sh test).
TEST(ServeTest, MetricsPassPromtool) {
  ASSERT_EQ(std::system("command -v promtool >/dev/null 2>&1"), 0)
      << "promtool is missing: scripts/setup.sh test installs Debian's prometheus package";
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  int status = 0;
  for (const auto& p : Heldout(5)) Post(s, "/v1/completions", {{"prompt", p.prompt}, {"slo_ms", 10000}}, &status);
  Post(s, "/v1/completions", {{"prompt", 5}}, &status);  // an error counter too
  auto m = s.Client().Get("/metrics");
  ASSERT_TRUE(m);
  const fs::path f = s.dir() / "metrics.txt";
  std::ofstream(f) << m->body;
  const std::string cmd = "promtool check metrics < " + f.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << out;  // no lint warnings either
  for (const char* name : {"tediserve_requests_total", "tediserve_request_latency_seconds_bucket",
                           "tediserve_scheduler_seconds", "tediserve_instances"})
    EXPECT_NE(m->body.find(name), std::string::npos) << name;
  // The workers run on this machine, so every leg of the steps' round trips was counted, and
  // together they fit in the launch-to-result time.
  const auto value = [&](const std::string& series) {  // -1: absent
    const size_t at = m->body.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(m->body.substr(at + series.size() + 2));
  };
  double legs = 0;
  for (const std::string leg : {"to_worker", "worker", "from_worker", "loop"}) {
    const double v = value("tediserve_step_overhead_seconds_total{leg=\"" + leg + "\"}");
    ASSERT_GE(v, 0) << leg;
    if (leg != "worker") {
      EXPECT_GT(v, 0) << leg;
    }
    legs += v;
  }
  EXPECT_LT(legs + value("tediserve_step_seconds_total"), value("tediserve_step_elapsed_seconds_total") * 1.0001);
}

// 1,000 streaming requests open at once are all held and answered; 20 clients that hang up
// after their first event cancel their requests, and the server stays up. The workers are
// stopped (SIGSTOP) until the server holds all 1,000, so none can finish before the last
// connects however slow the machine is.
TEST(ServeTest, ThousandConcurrentStreamsAndDisconnects) {
  Server s({"--http-threads", "1100", "--max-queue", "2000", "--layout", "1,1", "--cores", "0,1"}, {});
  ASSERT_GT(s.port(), 0) << s.Log();
  ASSERT_EQ(WaitHealthy(s, 2, 60).value("instances_up", 0), 2) << s.Log();
  const std::vector<pid_t> agents = ChildrenOf(s.pid());
  ASSERT_EQ(agents.size(), 1u);
  const std::vector<pid_t> workers = ChildrenOf(agents[0]);
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t w : workers) ASSERT_EQ(kill(w, SIGSTOP), 0);
  const int n = 1000, quitters = 20;
  const auto problems = Heldout(100);
  std::atomic<int> complete{0}, open{0}, peak{0}, hung_up{0}, failed{0};
  std::atomic<int> go{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < n + quitters; ++i)
    clients.emplace_back([&, i] {
      const bool quit = i >= n;
      while (go.load() == 0) std::this_thread::yield();
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(120, 0);
      c.set_connection_timeout(60, 0);
      json body = {{"prompt", problems[static_cast<size_t>(i) % problems.size()].prompt},
                   {"slo_ms", 600000},
                   {"max_tokens", 64},
                   {"stream", true}};
      std::string got;
      bool counted = false;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        if (!counted) {
          counted = true;
          const int now = ++open;
          int p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
        }
        got.append(data, len);
        if (quit) {
          ++hung_up;
          return false;  // hang up mid-stream
        }
        return true;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      const bool sent = c.send(req, res, err);
      if (counted) --open;
      if (!quit && !(sent && res.status == 200)) ++failed;
      if (!quit && sent && res.status == 200 && got.find("data: [DONE]") != std::string::npos) ++complete;
    });
  // The server's own count of live requests, sampled while the clients run.
  std::atomic<bool> sampling{true};
  std::atomic<int> live_peak{0};
  std::thread sampler([&] {
    httplib::Client c("127.0.0.1", s.port());
    while (sampling) {
      if (auto m = c.Get("/metrics")) {
        live_peak = std::max(live_peak.load(), static_cast<int>(MetricIn(m->body, "tediserve_live_requests", 0)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  go = 1;
  // Resume the workers once the server holds every stream (or after 20 s: the count below
  // then fails), well inside the 30-s batch timeout.
  for (int i = 0; i < 200 && live_peak.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (pid_t w : workers) kill(w, SIGCONT);
  for (auto& c : clients) c.join();
  sampling = false;
  sampler.join();
  EXPECT_EQ(complete.load(), n) << s.Log();
  EXPECT_EQ(hung_up.load(), quitters);
  EXPECT_GE(live_peak.load(), n) << "the server never held every stream at once (peak " << live_peak << ")" << s.Log();
  int status = 0;
  Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  EXPECT_EQ(status, 200);
  auto m = s.Client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tediserve_requests_total{outcome=\"cancelled\"}"), std::string::npos);
}

// A client of a non-streaming request that hangs up cancels its request: the worker is
// stopped (SIGSTOP) so the requests cannot finish, eleven clients send theirs and, once the
// server holds all eleven, ten close their connections; the server cancels those ten and
// not the eleventh, which stays and gets its answer after SIGCONT. (The clients hang up
// only once the server has every request, so a loaded machine that reads a request late
// cannot turn it into one that completes.)
TEST(ServeTest, NonStreamingClientHangUpCancelsItsRequest) {
  Server s({}, {"--layout", "1", "--cores", "0"});
  ASSERT_GT(s.port(), 0) << s.Log();
  ASSERT_EQ(WaitHealthy(s, 1, 60).value("instances_up", 0), 1) << s.Log();
  auto metric = [&](const std::string& key) {
    auto m = s.Client().Get("/metrics");
    return m ? static_cast<int>(MetricIn(m->body, key, 0)) : -1;
  };
  auto cancelled = [&] { return metric("tediserve_requests_total{outcome=\"cancelled\"}"); };
  const std::vector<pid_t> agents = ChildrenOf(s.pid());
  ASSERT_EQ(agents.size(), 1u);
  const std::vector<pid_t> workers = ChildrenOf(agents[0]);
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(kill(workers[0], SIGSTOP), 0);
  const int quitters = 10;
  const std::string body = json({{"prompt", "48+39="}, {"slo_ms", 600000}}).dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<int> fds;
  for (int i = 0; i < quitters + 1; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  }
  int live = 0;
  for (int i = 0; i < 600 && live < quitters + 1; ++i) {
    live = metric("tediserve_live_requests");
    if (live < quitters + 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(live, quitters + 1) << "the server holds every request before the clients leave\n" << s.Log();
  const int stayer = fds.back();
  fds.pop_back();
  for (const int fd : fds) close(fd);
  // The server notices within a second or so; all ten leave even with the worker stopped
  // (the one in flight once its batch is answered, so allow it to be missing until then).
  int seen = 0;
  for (int i = 0; i < 100 && seen < quitters - 1; ++i) {
    seen = cancelled();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(seen, quitters - 1) << s.Log();
  ASSERT_EQ(kill(workers[0], SIGCONT), 0);
  int status = 0;
  const json r = Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 60000}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
  for (int i = 0; i < 100 && seen < quitters; ++i) {
    seen = cancelled();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(seen, quitters) << "every hung-up request is cancelled, none completed";
  // The client that stayed (its request checked for a hang-up for over a second) is answered.
  std::string answer;
  char buf[4096];
  timeval tv{30, 0};
  setsockopt(stayer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (ssize_t n; answer.find("\r\n\r\n") == std::string::npos && (n = read(stayer, buf, sizeof buf)) > 0;)
    answer.append(buf, static_cast<size_t>(n));
  close(stayer);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_EQ(cancelled(), quitters) << "the client that stayed was not cancelled";
}

// A client that sends half a request and stalls is cut off after the read timeout; others are
// served meanwhile.
TEST(ServeTest, SlowClientIsCutOffOthersServed) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
  ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  int status = 0;
  Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  EXPECT_EQ(status, 200);
  // The server's read timeout is 10 s: it closes the stalled connection (read returns 0 or
  // an error) well before 30 s.
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  ssize_t r = 0;
  while ((r = read(fd, buf, sizeof buf)) > 0) {
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  EXPECT_LT(waited, 25) << "the stalled connection was not closed";
  Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  EXPECT_EQ(status, 200);
}

// Options from a TOML config file; a flag on the command line wins; unknown keys are errors.
TEST(ServeTest, ConfigFileSetsOptions) {
  const fs::path dir = fs::temp_directory_path() / ("tedi_config_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "serve.toml") << "# test config\napi-key = \"from-config\"\nlayout = \"1\"\ncores = \"0\"\n"
                                    << "max-queue = 64\n";
  {
    Server s({"--config", (dir / "serve.toml").string()}, {});
    ASSERT_GT(s.port(), 0) << s.Log();
    int status = 0;
    Post(s, "/v1/completions", {{"prompt", "48+39="}}, &status);
    EXPECT_EQ(status, 401);  // the config's API key is required
    auto ok = s.Client().Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer from-config"}},
                              R"({"prompt":"48+39=","slo_ms":10000})", "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
    auto h = s.Client().Get("/admin/layout", httplib::Headers{{"Authorization", "Bearer from-config"}});
    ASSERT_TRUE(h);
    EXPECT_EQ(json::parse(h->body)["instances"].size(), 1u) << h->body;
  }
  {
    Server s({"--config", (dir / "serve.toml").string(), "--api-key", "from-flag"}, {});
    ASSERT_GT(s.port(), 0) << s.Log();
    auto ok = s.Client().Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer from-flag"}},
                              R"({"prompt":"48+39=","slo_ms":10000})", "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
  }
  std::ofstream(dir / "bad.toml") << "port = 0\nno-such-option = 3\n";
  for (const std::string& f : {(dir / "bad.toml").string(), (dir / "missing.toml").string()}) {
    Server s({"--config", f}, {});
    int st = -1;
    ASSERT_TRUE(s.WaitExit(30, &st)) << f;
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << f << ": " << s.Log();
    EXPECT_FALSE(s.Log().empty());
  }
  fs::remove_all(dir);
}

// /v1/chat/completions formats the conversation with the chat template (--chat-template; a
// model folder's tokenizer_config.json by default). This one turns the messages into the
// tiny model's "59+59=" prompt form; without it the prompt would be "59+59".
TEST(ServeTest, ChatUsesTheChatTemplate) {
  const fs::path dir = fs::temp_directory_path() / ("tedi_chat_template_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "plain.jinja")
      << "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
         "{% if add_generation_prompt %}={% endif %}";
  std::ofstream(dir / "raises.jinja") << "{{ raise_exception('only one user message') }}";
  std::ofstream(dir / "broken.jinja") << "{% for m in messages %}{{ m.content }";
  {
    Server s({"--chat-template", (dir / "plain.jinja").string()});
    ASSERT_GT(s.port(), 0) << s.Log();
    int status = 0;
    json r = Post(s, "/v1/chat/completions",
                  {{"messages", {{{"role", "system"}, {"content", "add"}}, {{"role", "user"}, {"content", "59+59"}}}},
                   {"slo_ms", 10000}, {"min_threshold", 0.9}},
                  &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["message"]["content"], "118") << r.dump();
    EXPECT_EQ(r["usage"]["prompt_tokens"], 6) << r.dump();  // "59+59=": the system message left out
  }
  {
    Server s({"--chat-template", (dir / "raises.jinja").string()});
    ASSERT_GT(s.port(), 0) << s.Log();
    int status = 0;
    json r = Post(s, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "1+1"}}}}}, &status);
    EXPECT_EQ(status, 400) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("only one user message"), std::string::npos) << r.dump();
  }
  for (const char* bad : {"broken.jinja", "missing.jinja"}) {
    Server s({"--chat-template", (dir / bad).string()});
    int st = -1;
    ASSERT_TRUE(s.WaitExit(30, &st)) << bad;
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << bad << ": " << s.Log();
    EXPECT_NE(s.Log().find(bad), std::string::npos) << s.Log();
  }
  fs::remove_all(dir);
}

TEST(ServeTest, SigtermDrainsAndExitsCleanly) {
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  int status = 0;
  Post(s, "/v1/completions", {{"prompt", "48+39="}, {"slo_ms", 10000}}, &status);
  ASSERT_EQ(status, 200);
  kill(s.pid(), SIGTERM);
  int st = -1;
  ASSERT_TRUE(s.WaitExit(15, &st)) << s.Log();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << s.Log();
}

// The official OpenAI client library (npm `openai`, installed by scripts/setup.sh test into
// tests/openai_client/node_modules) does completions, chat and streaming against the server.
TEST(ServeTest, OfficialOpenAiClientWorks) {
  const std::string dir = std::string(TEDI_SOURCE_DIR) + "/tests/openai_client";
  ASSERT_TRUE(fs::exists(dir + "/node_modules/openai/package.json"))
      << "the openai npm package is missing: run scripts/setup.sh test (npm ci in " << dir << ")";
  Server s;
  ASSERT_GT(s.port(), 0) << s.Log();
  const std::string cmd = "node " + dir + "/client_test.mjs " + std::to_string(s.port()) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out << s.Log();
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
}

TEST(ServeTest, BadFlagsExitWithAClearError) {
  for (std::vector<std::string> extra : {std::vector<std::string>{"--model", "/nonexistent-model"},
                                         std::vector<std::string>{"--policy", "nope"},
                                         std::vector<std::string>{"--profile", "/nonexistent.csv"},
                                         std::vector<std::string>{"--batch-steps", "0"},
                                         std::vector<std::string>{"--batch-steps", "17"},
                                         std::vector<std::string>{"--step-timeout", "0"}}) {
    Server s(extra);
    int st = -1;
    ASSERT_TRUE(s.WaitExit(30, &st)) << extra[0];
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << extra[0] << ": " << s.Log();
    // A bad value of a flag with a range names the flag and the range.
    const char* want = extra[0] == "--batch-steps"    ? "not in range 1 to 16"
                       : extra[0] == "--step-timeout" ? "--step-timeout"
                                                      : "error";
    EXPECT_NE(s.Log().find(want), std::string::npos) << extra[0] << ": [" << s.Log() << "]";
  }
}

}  // namespace
