#include "serve/worker.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "engine/decoder.h"
#include "engine/weights.h"
#include "policy/scheduler.h"
#include "serve/monotonic.h"
#include "serve/worker.grpc.pb.h"

namespace tediserve::serve {
namespace {

void ToProto(const engine::ConfidenceSummary& s, rpc::Confidence* c) {
  c->set_count(s.count);
  c->set_min(s.min);
  c->set_q1(s.q1);
  c->set_median(s.median);
  c->set_q3(s.q3);
  c->set_mean(s.mean);
}

class WorkerService final : public rpc::Worker::Service {
 public:
  WorkerService(std::unique_ptr<engine::DiffusionEngine> engine, std::string model, std::string token)
      : engine_(std::move(engine)), model_(std::move(model)), token_(std::move(token)) {}

  grpc::Status Run(grpc::ServerContext* ctx, grpc::ServerReaderWriter<rpc::WorkerEvent, rpc::WorkerCommand>* stream) override {
    if (!token_.empty()) {
      auto it = ctx->client_metadata().find("authorization");
      const std::string want = "Bearer " + token_;
      if (it == ctx->client_metadata().end() || std::string(it->second.data(), it->second.size()) != want)
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong worker token");
    }
    std::unique_lock<std::mutex> lock(session_, std::try_to_lock);
    if (!lock.owns_lock()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker already serves a scheduler");
    states_.clear();  // a new session starts from nothing: the scheduler resends every state
    rpc::WorkerEvent ready;
    const engine::ModelConfig& c = engine_->config();
    auto* r = ready.mutable_ready();
    r->set_model(model_);
    r->set_tp(engine_->tp_degree());
    r->set_vocab_size(c.vocab_size);
    r->set_max_seq_len(c.max_seq_len);
    r->set_mask_token_id(c.mask_token_id);
    r->set_eos_token_id(c.eos_token_id);
    r->set_pid(getpid());
    if (!stream->Write(ready)) return grpc::Status::OK;
    rpc::WorkerCommand cmd;
    while (stream->Read(&cmd)) {
      if (!cmd.has_batch()) continue;
      rpc::WorkerEvent ev;
      Handle(cmd.batch(), ev.mutable_result());
      ev.mutable_result()->set_worker_done_ns(MonotonicNs());
      if (!stream->Write(ev)) break;
    }
    states_.clear();
    return grpc::Status::OK;
  }

 private:
  // Runs one batch. On any error nothing changes and the result carries the message.
  void Handle(const rpc::StepBatch& b, rpc::BatchResult* out) {
    out->set_worker_received_ns(MonotonicNs());
    out->set_batch_id(b.batch_id());
    if (b.steps() < 0 || b.steps() > policy::kMaxBatchSteps)
      return Fail(out, "steps must be in [0, " + std::to_string(policy::kMaxBatchSteps) + "]");
    for (int64_t id : b.release()) states_.erase(id);
    std::map<int64_t, std::unique_ptr<engine::DecodeState>> fresh;
    for (const rpc::RequestState& st : b.states()) {
      const rpc::DecodeParams& p = st.params();
      engine::DecodeOptions o{p.gen_length(), p.block_size(), p.use_cache(), p.eos_early_stop(), p.temperature(),
                              p.seed()};
      std::vector<int32_t> prompt(st.prompt().begin(), st.prompt().end());
      StatusOr<std::unique_ptr<engine::DecodeState>> s =
          st.output().empty() ? engine_->NewRequest(st.id(), prompt, o)
                              : engine_->ResumeRequest(st.id(), prompt, o,
                                                       std::vector<int32_t>(st.output().begin(), st.output().end()),
                                                       st.steps());
      if (!s.ok()) {
        out->set_error("request " + std::to_string(st.id()) + ": " + s.status().message());
        return;
      }
      fresh[st.id()] = std::move(s).value();
    }
    std::vector<engine::StepRequest> reqs;
    std::unordered_set<int64_t> seen;
    for (const rpc::StepCommand& c : b.commands()) {
      engine::DecodeState* s = nullptr;
      if (auto it = fresh.find(c.id()); it != fresh.end()) s = it->second.get();
      else if (auto jt = states_.find(c.id()); jt != states_.end()) s = jt->second.get();
      if (s == nullptr) return Fail(out, "request " + std::to_string(c.id()) + " is not held by this worker");
      if (s->done()) return Fail(out, "request " + std::to_string(c.id()) + " is already done");
      if (!(c.threshold() > 0.0f && c.threshold() <= 1.0f))
        return Fail(out, "request " + std::to_string(c.id()) + ": threshold must be in (0, 1]");
      if (!seen.insert(c.id()).second) return Fail(out, "request " + std::to_string(c.id()) + " appears twice");
      reqs.push_back({s, c.threshold()});
    }
    for (auto& [id, s] : fresh) states_[id] = std::move(s);
    if (reqs.empty()) return;
    const int steps = std::max(1, b.steps());
    double seconds = 0;
    std::vector<engine::StepResult> results;
    for (int k = 0; k < steps && !reqs.empty(); ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = engine_->Step(reqs, &results); !st.ok()) {
        if (k == 0) return Fail(out, st.message());
        break;  // the steps that ran stand; the scheduler hears of them as a shorter batch
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::vector<engine::StepRequest> still;
      for (size_t i = 0; i < results.size(); ++i) {
        const engine::StepResult& r = results[i];
        const engine::DecodeState& s = *reqs[i].state;
        rpc::StepResult* o = out->add_results();
        o->set_id(r.id);
        o->set_step(k);
        for (auto [pos, tok] : r.unmasked) {
          o->add_positions(pos);
          o->add_tokens(tok);
        }
        o->set_block_done(r.block_done);
        o->set_request_done(r.request_done);
        ToProto(r.stats.block, o->mutable_block());
        ToProto(r.stats.output, o->mutable_output());
        for (int a : r.stats.block_above) o->add_block_above(a);
        if (r.request_done && s.options().eos_early_stop) {
          const int from = (r.block + 1) * s.block_size();
          if (from < s.gen_length()) o->set_eos_from(from);
        }
        if (r.request_done) {
          states_.erase(r.id);
        } else {
          still.push_back(reqs[i]);
        }
      }
      reqs = std::move(still);
    }
    out->set_seconds(seconds);
  }
  static void Fail(rpc::BatchResult* out, const std::string& msg) {
    out->clear_results();
    out->set_error(msg);
  }

  std::unique_ptr<engine::DiffusionEngine> engine_;
  std::string model_, token_;
  std::mutex session_;
  std::map<int64_t, std::unique_ptr<engine::DecodeState>> states_;
};

}  // namespace

Status RunWorker(const WorkerOptions& options, bool exit_on_stdin_eof) {
  if (options.tp < 1) return InvalidArgument("--tp must be >= 1");
  if (!options.cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : options.cores) {
      if (c < 0 || c >= CPU_SETSIZE) return InvalidArgument("--cores: core " + std::to_string(c) + " out of range");
      CPU_SET(c, &set);
    }
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      return InvalidArgument("--cores: cannot pin to the given cores on this machine");
  }
  // Signals go to one waiting thread, not to whichever thread gRPC or BLAS happens to run.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  ASSIGN_OR_RETURN(const Tls tls, Tls::Load(options.tls));
  ASSIGN_OR_RETURN(engine::LoadedModel m, engine::LoadModel(options.model_dir));
  auto model = std::make_shared<const engine::LoadedModel>(std::move(m));
  ASSIGN_OR_RETURN(auto engine, engine::DiffusionEngine::Create(model, options.tp));
  const std::string name = std::filesystem::path(options.model_dir).filename().string();
  WorkerService service(std::move(engine), name, options.token);

  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not shared
  int port = 0;
  builder.AddListeningPort(options.listen, tls.ServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Unavailable("cannot listen on " + options.listen);
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::cout << "tediserve-worker listening on " << host << ":" << port << std::endl;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  auto request_stop = [&] {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    cv.notify_all();
  };
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    request_stop();
  });
  signals.detach();
  if (exit_on_stdin_eof) {
    std::thread watch([&] {
      char buf[256];
      while (read(0, buf, sizeof buf) > 0) {
      }
      request_stop();
    });
    watch.detach();
  }
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return stop; });
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return Status::Ok();
}

}  // namespace tediserve::serve
