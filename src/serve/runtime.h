// The serving runtime's core: it drives the host layer (src/host/) with a real clock over
// worker processes, exactly as the simulator drives it with a virtual one (docs/design.md
// section 5). Its state is touched only by tasks, run one at a time under `run_mu_`: by the
// loop thread (timers, and whatever other threads post), or, for a worker's result, by that
// worker's reader thread itself when no one else is running tasks (no hand-off between the
// result and the next batch). HTTP threads only post work and wait on a request's channel for
// its progress.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"
#include "host/host.h"
#include "policy/latency_profile.h"
#include "serve/agent_hub.h"
#include "serve/launcher.h"
#include "serve/metrics.h"
#include "serve/worker_client.h"

namespace tediserve::serve {

struct RuntimeOptions {
  std::string model_dir;
  std::string worker_exe;         // the tediserve binary (default: this process's)
  std::vector<int> layout{1};     // TP degree of each instance
  // The local agent's devices: the core behind each (empty: 0, 1, ... as many as the layout
  // needs). Ignored without a local agent.
  std::vector<int> cores;
  bool local_agent = true;        // start an agent for this machine's cores
  std::string agent_listen = "127.0.0.1:0";  // where agents join (port 0: any free one)
  double agent_wait_s = 60;       // at start, how long to wait for agents to offer the layout's devices
  std::string policy = "tediserve";
  std::string profile_csv;        // latency profile of this model on this machine
  std::string calibration;        // tokens per step and accuracy by threshold (policy inputs)
  double slo_scale = 10;           // SLO of a request without slo_ms: this x its solo latency
  int max_live = 256;             // admission limit: live requests (queue full -> 429)
  int batch_steps = 2;            // steps a worker runs per batch (serve --batch-steps)
  bool use_cache = true;
  std::string cluster_token;      // shared secret between the scheduler, its agents and workers
  TlsFiles tls;                   // mutual TLS on those links (off: none); see serve/tls.h
  double step_timeout_s = 30;     // a batch unanswered this long fails its worker
  bool restart_workers = true;    // a failed worker is started again on the same cores
  // Called from the runtime's tasks for each request the core accepted, with the SLO it was given
  // (the live reconfigurer's workload monitor, src/serve/reconfigurer.h). Must be cheap.
  std::function<void(const policy::RequestSpec&)> on_accepted;
};

// Everything one generation request asks for, already validated and tokenised.
struct GenerateParams {
  std::vector<int32_t> prompt;
  int gen_length = 0;
  int block_size = 0;
  float temperature = 0;
  uint64_t seed = 0;
  double slo_s = 0;  // 0: the server's default
  int priority = 0;
  double min_threshold = 0, max_threshold = 1;
  bool eos_early_stop = true;
  bool canvas = false;  // keep every step's canvas for streaming
  // Wake the waiting HTTP thread after every step (streams, stop sequences); otherwise only
  // once the text is final (an end of sequence with nothing masked before it, or no mask
  // left) or the request is done: a step wakes no one who would only wait on.
  bool every_step = true;
};

// The final part of an output: the tokens before the first masked position, up to an end of
// sequence (not included). Its text can no longer grow unless a mask ended it.
struct FinalPrefix {
  size_t length = 0;
  bool eos = false;     // an end of sequence ended it
  bool masked = false;  // a masked position ended it
  bool Finished() const { return !masked; }
};
FinalPrefix FinalPrefixOf(const std::vector<int32_t>& output, int32_t mask_id, int32_t eos_id);

// What an HTTP thread sees of its request. The loop publishes; the HTTP thread waits.
struct RequestView {
  std::vector<int32_t> output;              // the canonical output (mask id where masked)
  std::vector<std::vector<int32_t>> canvases;  // every step's output since the last Wait (canvas mode)
  std::vector<double> thresholds;           // of every step so far
  int steps = 0;
  bool done = false;
  host::RequestRecord record;  // when done
  uint64_t version = 0;
};

class RequestChannel {
 public:
  // Waits until the view changed past `seen_version` or timeout_s passed; false on timeout.
  // Takes the pending canvases.
  bool Wait(uint64_t seen_version, double timeout_s, RequestView* out);
  policy::RequestId id() const { return id_; }

 private:
  friend class Runtime;
  policy::RequestId id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  RequestView view_;
};

class Runtime {
 public:
  // Starts the workers (one per layout entry), connects to them and starts the loop.
  static StatusOr<std::unique_ptr<Runtime>> Start(RuntimeOptions options);
  ~Runtime();

  // Queues a request; its channel reports progress. ResourceExhausted when the queue is full,
  // Unavailable while draining, InvalidArgument for what the policy core refuses.
  StatusOr<std::shared_ptr<RequestChannel>> Submit(const GenerateParams& params);
  // The client went away or stopped reading: the request leaves as cancelled.
  void Cancel(policy::RequestId id);
  // Stops taking requests, waits up to deadline_s for live ones, then fails the rest cleanly
  // and stops the workers.
  void Drain(double deadline_s);

  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  const engine::ModelConfig& config() const { return model_config_; }
  const std::string& model_name() const { return model_name_; }
  int default_gen_length() const { return default_gen_; }
  int block_size() const { return block_size_; }
  int instances_up() const;
  Metrics& metrics() { return metrics_; }
  // The pids of the worker processes now up.
  std::vector<int> WorkerPids() const;
  // One instance as the admin API shows it. state: up, starting, draining (leaving: its
  // residents move at their next block boundary), waiting (no free devices or agent yet).
  struct InstanceView {
    policy::InstanceId id = 0;
    int tp = 0;
    std::string node;
    std::vector<int> devices;
    std::string state;
  };
  std::vector<InstanceView> Instances() const;
  // What ChangeLayout decided: instances kept, instances drained and stopped, instances added
  // (started as soon as their devices are free).
  struct LayoutChange {
    std::vector<policy::InstanceId> keep, drain, launch;
  };
  // Moves the cluster to `layout` (the TP degree of each instance), e.g. 2 x TP1 -> 1 x TP2,
  // under load and losing nothing: instances of a degree still wanted stay, the others drain
  // and stop, the new ones start on the devices that frees. Any thread. InvalidArgument when
  // the joined agents cannot hold the layout, Unavailable while shutting down.
  StatusOr<LayoutChange> ChangeLayout(std::vector<int> layout);
  // The agents now joined.
  std::vector<AgentInfo> Agents() const { return hub_->Agents(); }
  // host:port where agents join.
  const std::string& agent_address() const { return hub_->address(); }

 private:
  Runtime() = default;
  struct Live {
    GenerateParams params;
    std::shared_ptr<RequestChannel> channel;
    std::vector<int32_t> output;
    std::vector<double> thresholds;
    int steps = 0;
    policy::InstanceId holder = -1;  // the instance holding its copy (-1: none)
    double arrival = 0;
    double first_final = -1;         // when the first output position became final
  };
  struct Instance {
    policy::InstanceInfo info;  // info.devices: devices of its node's agent
    std::string node;           // its agent's node name
    int64_t pid = 0;            // of its worker process, while up
    std::shared_ptr<WorkerClient> client;
    std::vector<policy::RequestId> release;  // copies to drop with its next batch
    bool up = false;
    bool starting = false;
    bool retiring = false;  // draining out of the layout (ChangeLayout)
    bool retired = false;   // out of the layout: its devices are free once it is not starting
    int restarts = 0;
    int generation = 0;  // bumped at each start: callbacks of an older worker are ignored
  };
  struct Flight {
    policy::InstanceId instance = 0;
    double launched = 0, deadline = 0;
  };

  double Now() const;
  // Adds a returned batch's launch-to-result time besides the engine's, by leg.
  void CountOverhead(const rpc::BatchResult& r, double launched, double now);
  // Queues a task and wakes the loop thread to run it.
  void Post(std::function<void()> task);
  // Queues a task and runs the queue on the calling thread unless another thread is running
  // tasks (which then runs it). Only for threads that hold no lock the tasks may take.
  void PostAndRun(std::function<void()> task);
  // Runs the queued tasks, then the timers, stuck flights and the host's output, and sets
  // when the next timer is due; `run_mu_` held.
  void RunTasks();
  void Loop();
  // Closes a worker's client; on that client's own reader thread, the loop thread finishes it.
  void RetireClient(std::shared_ptr<WorkerClient> c);
  void Absorb(double now);
  void SendBatch(const policy::StepBatch& b, double now);
  void SendBatches(double now);  // the host's new batches only (Absorb sends them and the rest)
  void OnResult(rpc::BatchResult r);
  void OnWorkerLost(policy::InstanceId id, int generation, const std::string& why);
  void StartWorker(policy::InstanceId id);  // launches on a helper thread, posts the result
  // Has instance `info`'s agent start its worker and connects to it; its results and its
  // loss (tagged with `generation`) are posted to the loop. Any thread.
  struct Started {
    int64_t pid = 0;
    std::shared_ptr<WorkerClient> client;
  };
  StatusOr<Started> LaunchAndConnect(const std::string& node, const policy::InstanceInfo& info, int generation);
  void StopInstanceWorker(Instance& inst);
  // Agents (run_mu_).
  void NoteAgent(const AgentInfo& a);
  bool Place(Instance& inst);  // on the first agent with inst.info.tp free devices
  void PlaceWaiting();         // places and starts new instances that wait for devices
  StatusOr<LayoutChange> ApplyLayout(const std::vector<int>& layout);
  void OnAgentJoined(const AgentInfo& a);
  void OnAgentLeft(const std::string& node, const std::string& why);
  void OnWorkerExited(const std::string& node, int64_t pid, const std::string& why);
  void RestartLocalAgent();
  // Fails every live request when nothing is up and nothing is coming back.
  void FailAllIfHopeless(double now);
  // After a step: the request's view (and canvas) for its HTTP thread, woken when it follows
  // every step or the text is final.
  void Publish(Live& l);
  void Finish(host::RequestRecord rec);
  void UpdateGauges();
  void DeclareMetrics();

  RuntimeOptions options_;
  Tls tls_;  // options_.tls, loaded
  std::unique_ptr<AgentHub> hub_;
  ChildProcess local_agent_;        // run_mu_ once started
  int local_agent_restarts_ = 0;
  bool local_agent_starting_ = false;
  std::map<std::string, AgentInfo> agents_;  // joined agents, by node (run_mu_)
  std::map<std::string, int> node_index_;    // node name -> InstanceInfo::node
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  engine::ModelConfig model_config_;
  std::string model_name_;
  int default_gen_ = 0, block_size_ = 0;
  policy::LatencyProfile profile_;
  std::unique_ptr<host::Host> host_;
  Metrics metrics_;

  // State of the tasks (run_mu_).
  std::unordered_map<policy::RequestId, Live> live_;
  std::map<policy::InstanceId, Instance> instances_;
  std::map<policy::BatchId, Flight> flights_;
  policy::InstanceId next_instance_id_ = 0;
  std::set<int> tps_seen_;  // TP degrees with an instances gauge
  bool draining_ = false;

  // Shared with posting threads.
  std::mutex run_mu_;  // held while running tasks (guards everything above)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  double next_wake_ = 0;   // when the next timer is due, as the last run of tasks left it
  double loop_until_ = 0;  // when the loop thread's sleep ends (Now() terms; 0: awake)
  bool retime_ = false;    // a run of tasks moved the next timer before that
  std::vector<std::shared_ptr<WorkerClient>> retired_clients_;  // for the loop thread to join
  std::atomic<int64_t> next_id_{0};
  std::atomic<int> live_count_{0};
  std::atomic<bool> accepting_{true};
  std::atomic<int> up_count_{0};
  std::vector<std::thread> starters_;
  std::thread loop_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tediserve::serve
