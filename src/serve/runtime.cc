#include "serve/runtime.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <iostream>
#include <set>

#include "common/input.h"
#include "engine/model_config.h"
#include "sim/calibration.h"

namespace tediserve::serve {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                            0.5,   1,      2.5,   5,    10,    30,   60};

void Log(const std::string& m) { std::cerr << ("tediserve serve: " + m + "\n") << std::flush; }

// Upper bounds (tokens) of the step-size classes that the measured step times are counted in
// (tediserve_step_size_*): a class holds the batches of more tokens than the bound before it.
constexpr int kStepSizeBounds[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

// The label set of a batch's class, made once (this runs for every returned batch).
const Labels& StepSizeLabels(int tokens) {
  static const std::vector<Labels> labels = [] {
    std::vector<Labels> v;
    for (int b : kStepSizeBounds) v.push_back({{"tokens_max", std::to_string(b)}});
    v.push_back({{"tokens_max", "+Inf"}});
    return v;
  }();
  size_t k = 0;
  while (k < std::size(kStepSizeBounds) && tokens > kStepSizeBounds[k]) ++k;
  return labels[k];
}

constexpr int kMaxRestarts = 5;          // of one worker between agent joins, and of the local agent
constexpr double kWorkerStartTimeout = 150;
const char* const kLocalNode = "local";

// The address the local agent dials: the hub's, with a wildcard host replaced by loopback.
std::string LocalJoinAddress(const std::string& hub) {
  const size_t colon = hub.rfind(':');
  const std::string host = hub.substr(0, colon);
  if (host == "0.0.0.0" || host == "[::]" || host == "::") return "127.0.0.1" + hub.substr(colon);
  return hub;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times one call into the policy core (the host layer) from a task: the thread's CPU
// time is what the policy costs; wall time also counts the moments the OS gave the core to
// another thread (on a machine with fewer cores than busy threads, much larger).
class PolicyTimer {
 public:
  explicit PolicyTimer(Metrics& m) : m_(m), cpu0_(ThreadCpuSeconds()), wall0_(std::chrono::steady_clock::now()) {}
  ~PolicyTimer() {
    m_.Add("tediserve_scheduler_seconds_total", ThreadCpuSeconds() - cpu0_);
    m_.Add("tediserve_scheduler_wall_seconds_total",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count());
  }
  PolicyTimer(const PolicyTimer&) = delete;
  PolicyTimer& operator=(const PolicyTimer&) = delete;

 private:
  Metrics& m_;
  double cpu0_;
  std::chrono::steady_clock::time_point wall0_;
};

}  // namespace

FinalPrefix FinalPrefixOf(const std::vector<int32_t>& output, int32_t mask_id, int32_t eos_id) {
  FinalPrefix p;
  for (int32_t t : output) {
    if (t == mask_id || t == eos_id) {
      p.masked = t == mask_id;
      p.eos = !p.masked;
      break;
    }
    ++p.length;
  }
  return p;
}

bool RequestChannel::Wait(uint64_t seen, double timeout_s, RequestView* out) {
  std::unique_lock<std::mutex> l(mu_);
  const bool changed = cv_.wait_for(l, std::chrono::duration<double>(timeout_s),
                                    [&] { return view_.version > seen || view_.done; });
  *out = view_;
  view_.canvases.clear();
  return changed;
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Start(RuntimeOptions o) {
  if (o.layout.empty()) return InvalidArgument("--layout: at least one instance");
  int need = 0;
  for (int tp : o.layout) {
    if (tp < 1 || tp > 64) return InvalidArgument("--layout: TP degrees must be in [1, 64]");
    need += tp;
  }
  if (o.cores.empty())
    for (int c = 0; c < need; ++c) o.cores.push_back(c % std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))));
  if (static_cast<int>(o.cores.size()) < need)
    return InvalidArgument("--cores: the layout needs " + std::to_string(need) + " cores, " +
                           std::to_string(o.cores.size()) + " given");
  if (o.max_live < 1) return InvalidArgument("--max-queue must be >= 1");
  if (o.batch_steps < 1 || o.batch_steps > policy::kMaxBatchSteps)
    return InvalidArgument("--batch-steps must be in [1, " + std::to_string(policy::kMaxBatchSteps) + "]");
  if (!(o.slo_scale > 0) || !std::isfinite(o.slo_scale)) return InvalidArgument("--slo-scale must be > 0");
  if (o.worker_exe.empty()) o.worker_exe = SelfExe();
  ASSIGN_OR_RETURN(Tls tls, Tls::Load(o.tls));
  o.tls = tls.files();  // absolute paths, for the local agent
  if (!(o.agent_wait_s >= 0) || o.agent_wait_s > 3600) return InvalidArgument("--agent-wait must be in [0, 3600] s");
  {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(o.model_dir, ec);
    if (!ec) o.model_dir = abs.lexically_normal().string();
  }

  std::unique_ptr<Runtime> rt(new Runtime());
  rt->t0_ = std::chrono::steady_clock::now();
  {
    const std::string path = (std::filesystem::path(o.model_dir) / "config.json").string();
    ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "model config", std::uint64_t{16} << 20));
    ASSIGN_OR_RETURN(rt->model_config_, engine::ModelConfig::FromJson(text, path));
  }
  ASSIGN_OR_RETURN(engine::Tokenizer tok,
                   engine::Tokenizer::FromFile((std::filesystem::path(o.model_dir) / "tokenizer.json").string()));
  rt->tokenizer_ = std::make_unique<engine::Tokenizer>(std::move(tok));
  ASSIGN_OR_RETURN(const engine::GenerationDefaults d, engine::LoadGenerationDefaults(o.model_dir));
  rt->default_gen_ = d.gen_length;
  rt->block_size_ = d.block_size;
  rt->model_name_ = std::filesystem::path(o.model_dir).lexically_normal().filename().string();
  if (rt->model_name_.empty()) rt->model_name_ = std::filesystem::path(o.model_dir).parent_path().filename().string();

  auto prof = policy::LatencyProfile::LoadCsv(o.profile_csv);
  if (!prof.ok()) return prof.status().WithContext("--profile");
  rt->profile_ = std::move(prof).value();
  for (int tp : o.layout)
    if (!rt->profile_.HasTp(tp))
      return InvalidArgument("--profile " + o.profile_csv + " has no column for TP degree " + std::to_string(tp));
  auto cal = sim::LoadCalibration(o.calibration);
  if (!cal.ok()) return cal.status().WithContext("--calibration");

  ASSIGN_OR_RETURN(policy::PolicyOptions po, policy::PolicyOptions::Named(o.policy));
  po.block_size = rt->block_size_;
  po.cache = o.use_cache;
  po.max_live_requests = o.max_live;
  po.batch_steps = o.batch_steps;
  po.steps_cv = cal->steps_cv;  // the priority rescue margin, as in the simulator
  host::HostOptions ho;
  for (double c : po.thresholds) {
    po.tokens_per_step.push_back(cal->TokensPerStepAt(c));
    po.accuracy.push_back(cal->AccuracyAt(c));
  }
  ho.estimator.thresholds = po.thresholds;
  ho.estimator.tokens_per_step = po.tokens_per_step;
  ho.policy = po;
  ho.slo_scale = o.slo_scale;
  const sim::Calibration c = *cal;
  ho.accuracy = [c](double t) { return c.AccuracyAt(t); };
  rt->options_ = o;
  rt->tls_ = std::move(tls);
  rt->DeclareMetrics();

  // Agents: the local one (this machine's cores) and any that join from elsewhere. Their
  // callbacks run on gRPC threads and are posted to the loop (queued until it runs).
  Runtime* r = rt.get();
  AgentHub::Callbacks cb;
  cb.joined = [r](const AgentInfo& a) { r->Post([r, a] { r->OnAgentJoined(a); }); };
  cb.left = [r](const std::string& node, const std::string& why) {
    r->Post([r, node, why] { r->OnAgentLeft(node, why); });
  };
  cb.worker_exited = [r](const std::string& node, int64_t pid, const std::string& why) {
    r->Post([r, node, pid, why] { r->OnWorkerExited(node, pid, why); });
  };
  ASSIGN_OR_RETURN(rt->hub_, AgentHub::Start(o.agent_listen, o.cluster_token, rt->tls_.ServerCredentials(), std::move(cb)));
  if (o.local_agent) {
    AgentLaunch al{o.worker_exe, LocalJoinAddress(rt->hub_->address()), "", o.cores, kLocalNode, o.cluster_token, o.tls};
    auto agent = LaunchAgent(al);
    if (!agent.ok()) return agent.status().WithContext("starting the local agent");
    rt->local_agent_ = *agent;
  }

  // Place each instance on an agent with enough free devices, waiting for agents to join.
  for (size_t i = 0; i < o.layout.size(); ++i) {
    Instance inst;
    inst.info.id = static_cast<policy::InstanceId>(i);
    inst.info.tp = o.layout[i];
    rt->instances_[inst.info.id] = std::move(inst);
  }
  rt->next_instance_id_ = static_cast<policy::InstanceId>(o.layout.size());
  const auto wait_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.agent_wait_s);
  size_t placed = 0;
  while (true) {
    rt->agents_.clear();
    for (const AgentInfo& a : rt->hub_->Agents()) rt->NoteAgent(a);
    placed = 0;
    for (auto& [id, inst] : rt->instances_) {
      inst.node.clear();
      inst.info.devices.clear();
    }
    for (auto& [id, inst] : rt->instances_) placed += rt->Place(inst) ? 1 : 0;
    if (placed == rt->instances_.size() || std::chrono::steady_clock::now() >= wait_until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (placed == 0)
    return Unavailable("no agent offered the devices of any instance within " +
                       std::to_string(static_cast<int>(o.agent_wait_s)) + " s (agents join " +
                       rt->hub_->address() + ")");

  // Workers, started side by side; the host starts with those that came up.
  std::vector<std::future<Status>> starts;
  for (auto& [id, inst] : rt->instances_) {
    if (inst.node.empty()) {
      Log("instance " + std::to_string(id) + " (tp " + std::to_string(inst.info.tp) +
          ") waits for an agent with free devices");
      continue;
    }
    Instance* p = &inst;
    starts.push_back(std::async(std::launch::async, [r, p] {
      p->generation = 1;
      ASSIGN_OR_RETURN(Started w, r->LaunchAndConnect(p->node, p->info, p->generation));
      p->pid = w.pid;
      p->client = std::move(w.client);
      p->up = true;
      return Status::Ok();
    }));
  }
  Status first_error;
  for (auto& f : starts) {
    Status s = f.get();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (!first_error.ok()) {
    for (auto& [id, inst] : rt->instances_) {
      if (inst.client) inst.client->Close();
      rt->StopInstanceWorker(inst);
    }
    return first_error.WithContext("starting workers");
  }
  for (auto& [id, inst] : rt->instances_)
    if (inst.up) ho.instances.push_back(inst.info);
  rt->up_count_ = static_cast<int>(ho.instances.size());
  auto host = host::Host::Create(std::move(ho), &rt->profile_);
  if (!host.ok()) return host.status();
  rt->host_ = std::move(host).value();
  rt->UpdateGauges();
  rt->loop_ = std::thread([p = rt.get()] { p->Loop(); });
  return rt;
}

Runtime::~Runtime() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
  // A reader thread may be running tasks; after this none starts (stop_) and none blocks
  // on run_mu_ (they only try it), so closing the clients below can join the readers.
  std::lock_guard<std::mutex> run(run_mu_);
  for (auto& [id, inst] : instances_) {
    if (inst.client) inst.client->Close();
    StopInstanceWorker(inst);
  }
  // Ends the agents' streams, which also fails starts still waiting on an agent; the
  // callbacks it triggers only queue tasks that nobody runs.
  if (hub_) hub_->Shutdown();
  for (auto& t : starters_)
    if (t.joinable()) t.join();
  StopChild(&local_agent_);  // its stdin closes: it stops the workers it still has
}

double Runtime::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Runtime::Post(std::function<void()> task) {
  std::lock_guard<std::mutex> l(mu_);
  tasks_.push_back(std::move(task));
  cv_.notify_one();
}

namespace {
thread_local const void* running_tasks_of = nullptr;  // the runtime whose tasks this thread runs
}  // namespace

void Runtime::PostAndRun(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
    if (stop_) return;
  }
  if (running_tasks_of == this) return;  // posted by a task: the run in progress takes it
  // Whoever holds run_mu_ looks at the queue again after releasing it, so a task queued while
  // the try fails is never left behind.
  while (run_mu_.try_lock()) {
    running_tasks_of = this;
    RunTasks();
    running_tasks_of = nullptr;
    run_mu_.unlock();
    std::lock_guard<std::mutex> l(mu_);
    if (tasks_.empty() || stop_) return;
  }
}

int Runtime::instances_up() const { return up_count_.load(); }

std::vector<int> Runtime::WorkerPids() const {
  auto done = std::make_shared<std::promise<std::vector<int>>>();
  auto fut = done->get_future();
  const_cast<Runtime*>(this)->Post([this, done] {
    std::vector<int> pids;
    for (const auto& [id, inst] : instances_)
      if (inst.up) pids.push_back(static_cast<int>(inst.pid));
    done->set_value(pids);
  });
  return fut.get();
}

std::vector<Runtime::InstanceView> Runtime::Instances() const {
  auto done = std::make_shared<std::promise<std::vector<InstanceView>>>();
  auto fut = done->get_future();
  const_cast<Runtime*>(this)->Post([this, done] {
    std::vector<InstanceView> out;
    for (const auto& [id, inst] : instances_) {
      if (inst.retired) continue;
      const char* state = inst.retiring ? "draining" : inst.up ? "up" : inst.starting ? "starting" : "waiting";
      out.push_back({id, inst.info.tp, inst.node, inst.info.devices, state});
    }
    done->set_value(std::move(out));
  });
  return fut.get();
}

StatusOr<Runtime::LayoutChange> Runtime::ChangeLayout(std::vector<int> layout) {
  auto done = std::make_shared<std::promise<StatusOr<LayoutChange>>>();
  auto fut = done->get_future();
  Post([this, done, layout = std::move(layout)] { done->set_value(ApplyLayout(layout)); });
  return fut.get();
}

StatusOr<Runtime::LayoutChange> Runtime::ApplyLayout(const std::vector<int>& layout) {
  if (draining_) return Unavailable("the server is shutting down");
  if (layout.empty()) return InvalidArgument("layout: at least one instance");
  size_t largest = 0, total = 0;
  for (const auto& [node, a] : agents_) {
    largest = std::max(largest, a.devices.size());
    total += a.devices.size();
  }
  size_t need = 0;
  for (int tp : layout) {
    if (tp < 1) return InvalidArgument("layout: a TP degree must be >= 1, not " + std::to_string(tp));
    if (static_cast<size_t>(tp) > largest)
      return InvalidArgument("layout: no joined agent has " + std::to_string(tp) + " devices (the largest has " +
                             std::to_string(largest) + ")");
    need += static_cast<size_t>(tp);
  }
  if (need > total)
    return InvalidArgument("layout: needs " + std::to_string(need) + " devices; the joined agents have " +
                           std::to_string(total));
  // Keep an instance of every degree still wanted (running ones first); drain the rest.
  std::multiset<int> wanted(layout.begin(), layout.end());
  std::vector<policy::InstanceId> active;
  for (const auto& [id, inst] : instances_)
    if (!inst.retired && !inst.retiring) active.push_back(id);
  std::stable_sort(active.begin(), active.end(), [this](policy::InstanceId a, policy::InstanceId b) {
    return instances_[a].up > instances_[b].up;
  });
  LayoutChange change;
  for (policy::InstanceId id : active) {
    auto w = wanted.find(instances_[id].info.tp);
    if (w != wanted.end()) {
      wanted.erase(w);
      change.keep.push_back(id);
    } else {
      change.drain.push_back(id);
    }
  }
  const double now = Now();
  for (policy::InstanceId id : change.drain) {
    Instance& inst = instances_[id];
    if (inst.up) {
      inst.retiring = true;
      Status s = host_->DrainInstance(id, now);
      if (!s.ok()) Log("draining instance " + std::to_string(id) + ": " + s.message());
    } else {
      inst.retired = true;
      ++inst.generation;  // a start in progress is discarded when it completes
    }
  }
  for (int tp : wanted) {
    Instance inst;
    inst.info.id = next_instance_id_++;
    inst.info.tp = tp;
    change.launch.push_back(inst.info.id);
    instances_[inst.info.id] = std::move(inst);
  }
  std::string msg = "layout change: keep " + std::to_string(change.keep.size()) + ", drain " +
                    std::to_string(change.drain.size()) + ", launch " + std::to_string(change.launch.size());
  Log(msg);
  metrics_.Add("tediserve_layout_changes_total", 1);
  PlaceWaiting();
  UpdateGauges();
  Absorb(now);
  return change;
}

void Runtime::PlaceWaiting() {
  if (draining_) return;
  for (auto& [id, inst] : instances_) {
    if (inst.retired || inst.retiring || inst.up || inst.starting || !inst.node.empty()) continue;
    if (!Place(inst)) continue;
    inst.restarts = 0;
    Log("instance " + std::to_string(id) + " (tp " + std::to_string(inst.info.tp) + ") placed on " + inst.node +
        " devices " + JoinInts(inst.info.devices));
    StartWorker(id);
  }
}

void Runtime::DeclareMetrics() {
  Metrics& m = metrics_;
  m.Counter("tediserve_requests_total", "Requests that left, by outcome.");
  m.Counter("tediserve_slo_met_total", "Completed requests that met their SLO.");
  m.Counter("tediserve_slo_missed_total", "Completed requests that missed their SLO.");
  m.Counter("tediserve_http_errors_total", "Requests refused before reaching the scheduler, by HTTP status.");
  m.Histogram("tediserve_request_latency_seconds", "End-to-end latency of completed requests.", kLatencyBounds);
  m.Histogram("tediserve_queue_seconds", "From arrival to the first step's result.", kLatencyBounds);
  m.Histogram("tediserve_first_final_text_seconds", "From arrival until the first output position was final.",
              kLatencyBounds);
  m.Gauge("tediserve_live_requests", "Requests in the scheduler.");
  m.Gauge("tediserve_waiting_requests", "Live requests not placed on an instance.");
  m.Histogram("tediserve_step_threshold", "Confidence threshold of each request step.",
              {0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0});
  m.Counter("tediserve_request_steps_total", "Request steps run (one request in one batch).");
  m.Counter("tediserve_tokens_unmasked_total", "Output tokens unmasked.");
  m.Histogram("tediserve_batch_requests", "Requests per step batch.", {1, 2, 4, 8, 16, 32, 64, 128});
  m.Histogram("tediserve_step_seconds", "Step batch time measured by the worker.", kLatencyBounds);
  m.Gauge("tediserve_instances", "Model instances by TP degree and state.");
  m.Counter("tediserve_step_profile_seconds_total", "The latency profile's time for the step batches that returned.");
  m.Counter("tediserve_step_elapsed_seconds_total",
            "Launch to result of the same batches, as the loop saw it (worker, gRPC, queues).");
  // The same, by the batch's token count, so that a replay can scale the profile per batch size
  // (bench-serve --fidelity): label tokens_max, the class's upper bound.
  m.Counter("tediserve_step_size_batches_total", "Step batches that returned, by token count (tokens_max: class bound).");
  m.Counter("tediserve_step_size_tokens_total", "Tokens of the same batches (all their steps).");
  m.Counter("tediserve_step_size_steps_total", "Steps the same batches ran (serve --batch-steps each at most).");
  m.Counter("tediserve_step_size_profile_seconds_total", "The latency profile's time for the same batches.");
  m.Counter("tediserve_step_size_elapsed_seconds_total", "Launch to result of the same batches.");
  // Each batch's own ratio (launch to result / profile), summed and squared: how much the
  // step times scatter around the class's mean (a replay's step-time noise).
  m.Counter("tediserve_step_size_ratio_total", "Sum over the same batches of launch to result / profile time.");
  m.Counter("tediserve_step_size_ratio_squares_total", "Sum of the squares of the same ratios.");
  // Where launch to result goes besides the engine, for workers on this machine (their clock
  // is ours): leg to_worker (queueing, serialising, gRPC, the worker reading it), worker (the
  // worker's own handling besides the engine's step), from_worker (gRPC back to our reader),
  // loop (from the reader to the loop handling the result).
  m.Counter("tediserve_step_overhead_seconds_total",
            "Launch to result time besides the engine's, by leg, for step batches of workers on this machine.");
  m.Gauge("tediserve_step_time_scale",
          "Measured step time over the latency profile's, per instance (the default policy prices steps by it).");
  m.Counter("tediserve_migrations_total", "Requests moved to another instance.");
  m.Counter("tediserve_layout_changes_total", "Layout changes started (POST /admin/layout or the --reconfigure planner).");
  m.Counter("tediserve_worker_failures_total", "Workers that died or stopped answering.");
  m.Counter("tediserve_batch_failures_total", "Step batches a worker refused.");
  m.Gauge("tediserve_predictor_fallbacks", "Step predictions that fell back to the one-shot estimate.");
  m.Counter("tediserve_scheduler_seconds_total", "CPU time the runtime's tasks spent in the policy core (host layer).");
  m.Counter("tediserve_scheduler_wall_seconds_total",
            "Wall time of the same policy-core calls (includes time the OS ran other threads).");
  m.Counter("tediserve_loop_seconds_total",
            "CPU time spent running the runtime's tasks: policy core, results, dispatch, bookkeeping.");
  m.Counter("tediserve_step_seconds_total", "Time workers spent in steps.");
}

StatusOr<std::shared_ptr<RequestChannel>> Runtime::Submit(const GenerateParams& p) {
  if (!accepting_) return Unavailable("the server is shutting down");
  if (live_count_.load() >= options_.max_live)
    return ResourceExhausted("the queue is full (" + std::to_string(options_.max_live) + " live requests)");
  auto ch = std::make_shared<RequestChannel>();
  ch->id_ = next_id_++;
  ++live_count_;
  Post([this, p, ch] {
    const double now = Now();
    Live l;
    l.params = p;
    l.channel = ch;
    l.arrival = now;
    l.output.assign(static_cast<size_t>(p.gen_length), model_config_.mask_token_id);
    live_[ch->id_] = std::move(l);
    policy::RequestSpec spec;
    spec.id = ch->id_;
    spec.arrival = now;
    spec.prompt_len = static_cast<int>(p.prompt.size());
    spec.output_len = p.gen_length;
    spec.slo = p.slo_s;
    spec.priority = p.priority;
    spec.min_threshold = p.min_threshold;
    spec.max_threshold = p.max_threshold;
    Status s = Unavailable("the server is shutting down");
    if (!draining_) {
      PolicyTimer timer(metrics_);
      s = host_->Submit(spec, now);
    }
    if (s.ok() && options_.on_accepted) {
      if (const policy::RequestState* r = host_->scheduler().Find(ch->id_); r != nullptr) options_.on_accepted(r->spec);
    }
    if (!s.ok()) {
      host::RequestRecord rec;
      rec.id = ch->id_;
      rec.arrival = rec.finish = now;
      rec.outcome = host::Outcome::kRejected;
      rec.reason = s.message();
      Finish(rec);
    }
  });
  return ch;
}

void Runtime::Cancel(policy::RequestId id) {
  Post([this, id] {
    if (!live_.count(id)) return;
    PolicyTimer timer(metrics_);
    (void)host_->Cancel(id, Now());  // NotFound: it left meanwhile
  });
}

void Runtime::Drain(double deadline_s) {
  accepting_ = false;
  Post([this] { draining_ = true; });
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  while (live_count_.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  Post([this, done] {
    if (!live_.empty()) {
      (void)host_->FailAll(Now(), "the server shut down before the request finished");
      Absorb(Now());
    }
    done->set_value();
  });
  fut.wait();
}

void Runtime::RetireClient(std::shared_ptr<WorkerClient> c) {
  if (!c) return;
  c->Close();
  if (!c->OnReaderThread()) return;
  // Running a result's tasks on this client's own reader: the loop thread joins and drops it.
  std::lock_guard<std::mutex> l(mu_);
  retired_clients_.push_back(std::move(c));
  cv_.notify_one();
}

void Runtime::RunTasks() {
  const double cpu0 = ThreadCpuSeconds();
  while (true) {
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks.swap(tasks_);
    }
    if (tasks.empty()) break;
    for (auto& t : tasks) t();
  }
  const double now = Now();
  if (now >= host_->NextWakeup()) {
    PolicyTimer timer(metrics_);
    (void)host_->Tick(now);
  }
  // A worker that stops answering: its batch is lost and the worker replaced.
  std::vector<std::pair<policy::InstanceId, int>> stuck;
  for (const auto& [id, f] : flights_)
    if (now > f.deadline) stuck.emplace_back(f.instance, instances_[f.instance].generation);
  for (auto [inst, gen] : stuck) OnWorkerLost(inst, gen, "no answer within the step timeout");
  Absorb(now);
  UpdateGauges();
  double wake = host_->NextWakeup();
  for (const auto& [id, f] : flights_) wake = std::min(wake, f.deadline);
  metrics_.Add("tediserve_loop_seconds_total", ThreadCpuSeconds() - cpu0);
  std::lock_guard<std::mutex> l(mu_);  // while run_mu_ is held: the last run's timer wins
  next_wake_ = wake;
  if (wake < loop_until_) {  // the loop thread sleeps past it
    retime_ = true;
    cv_.notify_one();
  }
}

void Runtime::Loop() {
  while (true) {
    {
      std::lock_guard<std::mutex> run(run_mu_);
      running_tasks_of = this;
      RunTasks();
      running_tasks_of = nullptr;
    }
    std::unique_lock<std::mutex> l(mu_);
    if (stop_) return;
    const double now = Now();
    const double wait = std::clamp(std::isfinite(next_wake_) ? next_wake_ - now : 1.0, 0.0, 1.0);
    loop_until_ = now + wait;
    cv_.wait_for(l, std::chrono::duration<double>(wait),
                 [&] { return stop_ || retime_ || !tasks_.empty() || !retired_clients_.empty(); });
    retime_ = false;
    loop_until_ = 0;
    std::vector<std::shared_ptr<WorkerClient>> retired;
    retired.swap(retired_clients_);
    l.unlock();
    for (auto& c : retired) c->Close();  // joins its reader
    retired.clear();
    if (stop_) return;
  }
}

void Runtime::Absorb(double now) {
  host::HostOutput& out = host_->output();
  while (!out.batches.empty() || !out.left.empty() || !out.drained.empty()) {
    host::HostOutput o = std::move(out);
    out.clear();
    for (const policy::StepBatch& b : o.batches) SendBatch(b, now);
    for (host::RequestRecord& r : o.left) Finish(std::move(r));
    for (policy::InstanceId id : o.drained) {
      (void)host_->RemoveInstance(id, now, false);
      auto it = instances_.find(id);
      if (it != instances_.end()) {
        Instance& inst = it->second;
        inst.up = false;
        RetireClient(std::move(inst.client));
        StopInstanceWorker(inst);
        --up_count_;
        if (inst.retiring) {
          inst.retiring = false;
          inst.retired = true;
          Log("instance " + std::to_string(id) + " (tp " + std::to_string(inst.info.tp) + ") drained and stopped");
          PlaceWaiting();
        }
      }
    }
  }
}

void Runtime::SendBatch(const policy::StepBatch& b, double now) {
  Instance& inst = instances_[b.instance];
  rpc::StepBatch msg;
  msg.set_batch_id(static_cast<uint64_t>(b.id));
  for (const policy::StepCommand& c : b.commands) {
    Live& l = live_.at(c.id);
    if (l.holder != b.instance) {
      if (l.holder >= 0) {
        instances_[l.holder].release.push_back(c.id);
        metrics_.Add("tediserve_migrations_total", 1);
      }
      rpc::RequestState* st = msg.add_states();
      st->set_id(c.id);
      st->mutable_prompt()->Add(l.params.prompt.begin(), l.params.prompt.end());
      if (l.steps > 0) st->mutable_output()->Add(l.output.begin(), l.output.end());
      rpc::DecodeParams* dp = st->mutable_params();
      dp->set_gen_length(l.params.gen_length);
      dp->set_block_size(l.params.block_size);
      dp->set_use_cache(options_.use_cache);
      dp->set_eos_early_stop(l.params.eos_early_stop);
      dp->set_temperature(l.params.temperature);
      dp->set_seed(l.params.seed);
      st->set_steps(l.steps);
      l.holder = b.instance;
    }
    rpc::StepCommand* sc = msg.add_commands();
    sc->set_id(c.id);
    sc->set_threshold(static_cast<float>(c.threshold));
    sc->set_recompute(c.recompute);
  }
  for (policy::RequestId id : inst.release) msg.add_release(id);
  inst.release.clear();
  if (b.steps > 1) msg.set_steps(b.steps);
  flights_[b.id] = Flight{b.instance, now, now + std::max(options_.step_timeout_s, 50 * b.expected_seconds)};
  metrics_.Observe("tediserve_batch_requests", static_cast<double>(b.commands.size()));
  if (!inst.up || !inst.client || !inst.client->Send(msg)) {
    // The stream is gone; the worker-lost event (posted by its reader) fails this batch too.
    if (!inst.up) OnWorkerLost(b.instance, inst.generation, "batch for an instance that is down");
  }
}

void Runtime::Publish(Live& l) {
  std::lock_guard<std::mutex> g(l.channel->mu_);
  RequestView& v = l.channel->view_;
  v.output = l.output;
  v.thresholds = l.thresholds;
  v.steps = l.steps;
  if (l.params.canvas) v.canvases.push_back(l.output);
  ++v.version;
  if (l.params.every_step || FinalPrefixOf(l.output, model_config_.mask_token_id, tokenizer_->eos_id()).Finished())
    l.channel->cv_.notify_all();
}

void Runtime::CountOverhead(const rpc::BatchResult& r, double launched, double now) {
  if (r.worker_received_ns() <= 0 || r.worker_done_ns() <= 0 || r.scheduler_received_ns() <= 0) return;
  const auto at = [this](int64_t ns) {  // a monotonic time in our Now() terms
    return std::chrono::duration<double>(std::chrono::nanoseconds(ns) - t0_.time_since_epoch()).count();
  };
  const double received = at(r.worker_received_ns()), done = at(r.worker_done_ns()),
               back = at(r.scheduler_received_ns());
  // A worker on another machine has another clock: its times fall outside the flight.
  if (!(launched <= received && received <= done && done <= back && back <= now)) return;
  static const Labels to_worker{{"leg", "to_worker"}}, worker{{"leg", "worker"}}, from_worker{{"leg", "from_worker"}},
      loop{{"leg", "loop"}};
  metrics_.Add("tediserve_step_overhead_seconds_total", received - launched, to_worker);
  metrics_.Add("tediserve_step_overhead_seconds_total", std::max(0.0, done - received - r.seconds()), worker);
  metrics_.Add("tediserve_step_overhead_seconds_total", back - done, from_worker);
  metrics_.Add("tediserve_step_overhead_seconds_total", now - back, loop);
}

void Runtime::OnResult(rpc::BatchResult r) {
  const double now = Now();
  const auto fit = flights_.find(static_cast<policy::BatchId>(r.batch_id()));
  if (fit == flights_.end()) return;  // a batch already given up (its worker failed)
  const Flight flight = fit->second;
  flights_.erase(fit);
  const policy::BatchId bid = static_cast<policy::BatchId>(r.batch_id());
  if (!r.error().empty()) {
    Log("worker " + std::to_string(flight.instance) + " refused batch " + std::to_string(bid) + ": " + r.error());
    metrics_.Add("tediserve_batch_failures_total", 1);
    // The worker changed nothing, but its copies may disagree with ours: resend them.
    if (const policy::StepBatch* b = host_->InFlight(bid))
      for (const auto& c : b->commands)
        if (auto it = live_.find(c.id); it != live_.end() && it->second.holder == flight.instance) {
          instances_[flight.instance].release.push_back(c.id);
          it->second.holder = -1;
        }
    PolicyTimer timer(metrics_);
    (void)host_->BatchFailed(bid, now);
  } else {
    metrics_.Observe("tediserve_step_seconds", r.seconds());
    metrics_.Add("tediserve_step_seconds_total", r.seconds());
    std::unordered_map<policy::RequestId, double> threshold_of;
    const policy::StepBatch* b = host_->InFlight(bid);
    if (b != nullptr)
      for (const auto& c : b->commands) threshold_of[c.id] = c.threshold;
    std::vector<policy::StepOutcome> outcomes;
    outcomes.reserve(static_cast<size_t>(r.results_size()));
    std::vector<policy::RequestId> stepped;  // published once the next batches are on their way
    for (const rpc::StepResult& s : r.results()) {
      auto it = live_.find(s.id());
      if (it == live_.end()) continue;
      Live& l = it->second;
      const int n = std::min(s.positions_size(), s.tokens_size());
      for (int k = 0; k < n; ++k) {
        const int pos = s.positions(k);
        if (pos >= 0 && pos < static_cast<int>(l.output.size())) l.output[static_cast<size_t>(pos)] = s.tokens(k);
      }
      if (s.eos_from() > 0)
        for (size_t p = static_cast<size_t>(s.eos_from()); p < l.output.size(); ++p)
          l.output[p] = model_config_.eos_token_id;
      const double th = threshold_of.count(s.id()) ? threshold_of[s.id()] : 0;
      if (l.steps == 0) metrics_.Observe("tediserve_queue_seconds", flight.launched - l.arrival);
      ++l.steps;
      l.thresholds.push_back(th);
      if (l.first_final < 0 && !l.output.empty() && l.output[0] != model_config_.mask_token_id) {
        l.first_final = now;
      }
      metrics_.Observe("tediserve_step_threshold", th);
      metrics_.Add("tediserve_request_steps_total", 1);
      metrics_.Add("tediserve_tokens_unmasked_total", n);
      stepped.push_back(s.id());
      policy::StepOutcome o;
      o.id = s.id();
      o.unmasked = n;
      o.block_done = s.block_done();
      o.request_done = s.request_done();
      o.features.block = {s.block().count(), s.block().min(), s.block().q1(), s.block().median(), s.block().q3(),
                          s.block().mean()};
      o.features.output = {s.output().count(), s.output().min(), s.output().q1(), s.output().median(),
                           s.output().q3(), s.output().mean()};
      for (int k = 0; k < s.block_above_size() && k < static_cast<int>(o.features.block_above.size()); ++k)
        o.features.block_above[static_cast<size_t>(k)] = s.block_above(k);
      if (o.request_done) l.holder = -1;  // the worker dropped its copy
      outcomes.push_back(o);
    }
    const bool in_flight = b != nullptr;                   // b is gone once the batch is done
    const int first_tokens = in_flight ? b->tokens : 0;
    Status st;
    {
      PolicyTimer timer(metrics_);
      st = host_->BatchDone(bid, outcomes, now);
    }
    if (st.ok() && in_flight) {
      // What ran (a batch of several steps ran fewer where requests finished) and the
      // profile's time for it, as the core priced it; the size class is the first step's.
      const policy::Scheduler::RanWork& ran = host_->scheduler().LastBatchDone();
      const double profile = ran.profile_seconds;
      metrics_.Add("tediserve_step_profile_seconds_total", profile);
      metrics_.Add("tediserve_step_elapsed_seconds_total", now - flight.launched);
      CountOverhead(r, flight.launched, now);
      const Labels& size = StepSizeLabels(first_tokens);
      metrics_.Add("tediserve_step_size_batches_total", 1, size);
      metrics_.Add("tediserve_step_size_tokens_total", static_cast<double>(ran.tokens), size);
      metrics_.Add("tediserve_step_size_steps_total", ran.steps, size);
      metrics_.Add("tediserve_step_size_profile_seconds_total", profile, size);
      metrics_.Add("tediserve_step_size_elapsed_seconds_total", now - flight.launched, size);
      if (profile > 0) {
        const double ratio = (now - flight.launched) / profile;
        metrics_.Add("tediserve_step_size_ratio_total", ratio, size);
        metrics_.Add("tediserve_step_size_ratio_squares_total", ratio * ratio, size);
      }
    }
    if (!st.ok()) Log("batch " + std::to_string(bid) + ": " + st.message());
    // The worker waits for its next batch while this thread works: send the new batches
    // first, then wake the requests' HTTP handlers (woken threads compete for the core the
    // worker left, and ran ahead of the send when they were woken first).
    SendBatches(now);
    for (policy::RequestId id : stepped)
      if (auto it = live_.find(id); it != live_.end()) Publish(it->second);
  }
  Absorb(now);
}

void Runtime::SendBatches(double now) {
  std::vector<policy::StepBatch> batches = std::move(host_->output().batches);
  host_->output().batches.clear();
  for (const policy::StepBatch& b : batches) SendBatch(b, now);
}

void Runtime::OnWorkerLost(policy::InstanceId id, int generation, const std::string& why) {
  auto it = instances_.find(id);
  if (it == instances_.end() || it->second.generation != generation || !it->second.up) return;
  Instance& inst = it->second;
  Log("worker " + std::to_string(id) + " (pid " + std::to_string(inst.pid) + " on " + inst.node + ") lost: " + why);
  inst.up = false;
  --up_count_;
  metrics_.Add("tediserve_worker_failures_total", 1);
  const double now = Now();
  for (auto f = flights_.begin(); f != flights_.end();)
    f = f->second.instance == id ? flights_.erase(f) : std::next(f);
  for (auto& [rid, l] : live_)
    if (l.holder == id) l.holder = -1;
  inst.release.clear();
  Status s = host_->RemoveInstance(id, now, true);
  if (!s.ok()) Log("removing worker " + std::to_string(id) + ": " + s.message());
  RetireClient(std::move(inst.client));
  StopInstanceWorker(inst);
  if (inst.retiring) {  // it was leaving the layout anyway
    inst.retiring = false;
    inst.retired = true;
    PlaceWaiting();
  }
  // Restarted on the same devices while its agent is there; otherwise when the agent rejoins.
  if (options_.restart_workers && !draining_ && !inst.retired && inst.restarts < kMaxRestarts &&
      agents_.count(inst.node)) {
    ++inst.restarts;
    StartWorker(id);
  }
  FailAllIfHopeless(now);
  Absorb(now);
}

void Runtime::FailAllIfHopeless(double now) {
  if (up_count_ > 0) return;
  for (const auto& [id, inst] : instances_)
    if (inst.starting) return;
  if (options_.local_agent && !draining_ && (local_agent_starting_ || local_agent_restarts_ < kMaxRestarts)) return;
  (void)host_->FailAll(now, "no worker is left to run it");
}

void Runtime::StopInstanceWorker(Instance& inst) {
  if (inst.pid > 0 && hub_) hub_->StopWorker(inst.node, inst.pid);
  inst.pid = 0;
}

void Runtime::StartWorker(policy::InstanceId id) {
  Instance& inst = instances_[id];
  inst.starting = true;
  const int gen = ++inst.generation;
  starters_.emplace_back([this, id, gen, node = inst.node, info = inst.info] {
    StatusOr<Started> w = LaunchAndConnect(node, info, gen);
    const Status err = w.status();
    Started started = w.ok() ? *w : Started{};
    Post([this, id, gen, started, err]() mutable {
      Instance& inst = instances_[id];
      inst.starting = false;
      if (inst.generation != gen || draining_ || inst.retired || !err.ok()) {
        if (!err.ok()) Log("starting worker " + std::to_string(id) + ": " + err.message());
        RetireClient(std::move(started.client));
        if (started.pid > 0) hub_->StopWorker(inst.node, started.pid);
        if (inst.retired) PlaceWaiting();
        FailAllIfHopeless(Now());
        Absorb(Now());
        return;
      }
      inst.pid = started.pid;
      inst.client = started.client;
      inst.up = true;
      ++up_count_;
      Status s = host_->AddInstance(inst.info, Now());
      if (!s.ok()) Log("adding worker " + std::to_string(id) + ": " + s.message());
      Log("worker " + std::to_string(id) + " started (pid " + std::to_string(started.pid) + " on " + inst.node + ")");
      Absorb(Now());
    });
  });
}

StatusOr<Runtime::Started> Runtime::LaunchAndConnect(const std::string& node, const policy::InstanceInfo& info,
                                                     int generation) {
  ASSIGN_OR_RETURN(RemoteWorker w,
                   hub_->StartWorker(node, info.tp, info.devices, options_.model_dir, kWorkerStartTimeout));
  const policy::InstanceId id = info.id;
  auto c = WorkerClient::Connect(
      w.address, options_.cluster_token, tls_.ChannelCredentials(), 30,
      [this](rpc::BatchResult res) { PostAndRun([this, res = std::move(res)]() mutable { OnResult(std::move(res)); }); },
      [this, id, generation](const std::string& why) {
        Post([this, id, generation, why] { OnWorkerLost(id, generation, why); });
      });
  if (!c.ok()) {
    hub_->StopWorker(node, w.pid);
    return c.status();
  }
  std::shared_ptr<WorkerClient> client(std::move(c).value().release());
  const rpc::Ready& ready = client->ready();
  if (ready.vocab_size() != model_config_.vocab_size || ready.mask_token_id() != model_config_.mask_token_id ||
      ready.tp() != info.tp) {
    client->Close();
    hub_->StopWorker(node, w.pid);
    return FailedPrecondition("the worker on node '" + node + "' runs model '" + ready.model() + "' (vocabulary " +
                              std::to_string(ready.vocab_size()) + ", tp " + std::to_string(ready.tp()) +
                              "), not this server's");
  }
  return Started{w.pid, client};
}

void Runtime::NoteAgent(const AgentInfo& a) {
  agents_[a.node] = a;
  if (!node_index_.count(a.node)) {
    const int n = static_cast<int>(node_index_.size());
    node_index_[a.node] = n;
  }
}

bool Runtime::Place(Instance& inst) {
  for (const auto& [node, a] : agents_) {
    std::set<int> used;
    for (const auto& [id, other] : instances_)
      if (other.node == node && (!other.retired || other.starting))
        used.insert(other.info.devices.begin(), other.info.devices.end());
    std::vector<int> free;
    for (int d : a.devices)
      if (!used.count(d)) free.push_back(d);
    if (static_cast<int>(free.size()) < inst.info.tp) continue;
    inst.node = node;
    inst.info.node = node_index_[node];
    inst.info.devices.assign(free.begin(), free.begin() + inst.info.tp);
    return true;
  }
  return false;
}

void Runtime::OnAgentJoined(const AgentInfo& a) {
  NoteAgent(a);
  Log("agent '" + a.node + "' joined with " + std::to_string(a.devices.size()) + " device(s)");
  for (auto& [id, inst] : instances_) {
    if (inst.up || inst.starting || inst.retired || draining_) continue;
    if (inst.node.empty() && !Place(inst)) continue;
    if (inst.node != a.node) continue;
    inst.restarts = 0;
    StartWorker(id);
  }
  UpdateGauges();
}

void Runtime::OnAgentLeft(const std::string& node, const std::string& why) {
  agents_.erase(node);
  Log("agent '" + node + "' left (" + why + ")");
  for (auto& [id, inst] : instances_)
    if (inst.node == node && inst.up) OnWorkerLost(id, inst.generation, "its agent left");
  if (node == kLocalNode && options_.local_agent && !draining_) RestartLocalAgent();
  FailAllIfHopeless(Now());
  Absorb(Now());
}

void Runtime::OnWorkerExited(const std::string& node, int64_t pid, const std::string& why) {
  for (auto& [id, inst] : instances_)
    if (inst.node == node && inst.pid == pid && inst.up) return OnWorkerLost(id, inst.generation, why);
}

void Runtime::RestartLocalAgent() {
  if (local_agent_starting_ || local_agent_restarts_ >= kMaxRestarts) return;
  ++local_agent_restarts_;
  local_agent_starting_ = true;
  StopChild(&local_agent_, 0);  // reaps it
  AgentLaunch al{options_.worker_exe, LocalJoinAddress(hub_->address()), "", options_.cores, kLocalNode,
                 options_.cluster_token, options_.tls};
  starters_.emplace_back([this, al] {
    StatusOr<ChildProcess> c = LaunchAgent(al);
    Post([this, c]() mutable {
      local_agent_starting_ = false;
      if (!c.ok()) {
        Log("restarting the local agent: " + c.status().message());
        FailAllIfHopeless(Now());
        Absorb(Now());
        return;
      }
      if (draining_) {
        StopChild(&*c, 1);
        return;
      }
      local_agent_ = *c;
      Log("local agent restarted (pid " + std::to_string(c->pid) + ")");
    });
  });
}

void Runtime::Finish(host::RequestRecord rec) {
  auto it = live_.find(rec.id);
  if (it == live_.end()) return;
  Live& l = it->second;
  if (l.holder >= 0) instances_[l.holder].release.push_back(rec.id);
  const char* outcome = host::OutcomeName(rec.outcome);
  metrics_.Add("tediserve_requests_total", 1, {{"outcome", outcome}});
  if (rec.outcome == host::Outcome::kCompleted) {
    metrics_.Add(rec.met ? "tediserve_slo_met_total" : "tediserve_slo_missed_total", 1);
    metrics_.Observe("tediserve_request_latency_seconds", rec.latency);
    if (l.first_final >= 0) metrics_.Observe("tediserve_first_final_text_seconds", l.first_final - rec.arrival);
  }
  {
    std::lock_guard<std::mutex> g(l.channel->mu_);
    RequestView& v = l.channel->view_;
    v.output = l.output;
    v.thresholds = l.thresholds;
    v.steps = l.steps;
    v.done = true;
    v.record = rec;
    ++v.version;
    l.channel->cv_.notify_all();
  }
  live_.erase(it);
  --live_count_;
}

void Runtime::UpdateGauges() {
  metrics_.Set("tediserve_live_requests", static_cast<double>(host_->live()));
  metrics_.Set("tediserve_waiting_requests", static_cast<double>(host_->scheduler().waiting()));
  metrics_.Set("tediserve_predictor_fallbacks", static_cast<double>(host_->predictor_fallbacks()));
  std::map<std::pair<int, std::string>, int> by;
  for (const auto& [id, inst] : instances_) {
    if (inst.retired) continue;
    tps_seen_.insert(inst.info.tp);
    if (inst.up)
      metrics_.Set("tediserve_step_time_scale", host_->scheduler().StepScale(id), {{"instance", std::to_string(id)}});
    ++by[{inst.info.tp, inst.retiring ? "draining" : inst.up ? "up" : inst.starting ? "starting" : "down"}];
  }
  for (int tp : tps_seen_)
    for (const char* state : {"up", "starting", "draining", "down"}) {
      const int n = by.count({tp, state}) ? by[{tp, state}] : 0;
      metrics_.Set("tediserve_instances", n, {{"tp", std::to_string(tp)}, {"state", state}});
    }
}

}  // namespace tediserve::serve
