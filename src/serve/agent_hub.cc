#include "serve/agent_hub.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "serve/worker.grpc.pb.h"

namespace tediserve::serve {

namespace {
using Stream = grpc::ServerReaderWriter<rpc::AgentCommand, rpc::AgentEvent>;

struct Pending {
  bool done = false;
  std::string error;
  RemoteWorker worker;
};

struct Connected {
  AgentInfo info;
  Stream* stream = nullptr;
  grpc::ServerContext* ctx = nullptr;
  std::mutex write_mu;
  std::map<int64_t, std::shared_ptr<Pending>> pending;  // by start id (under the hub's mutex)
};
}  // namespace

class AgentHub::Service final : public rpc::Scheduler::Service {
 public:
  Service(std::string token, Callbacks cb) : token_(std::move(token)), cb_(std::move(cb)) {}

  grpc::Status Join(grpc::ServerContext* ctx, Stream* stream) override {
    if (!token_.empty()) {
      auto it = ctx->client_metadata().find("authorization");
      const std::string want = "Bearer " + token_;
      if (it == ctx->client_metadata().end() || std::string(it->second.data(), it->second.size()) != want)
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong cluster token");
    }
    rpc::AgentEvent ev;
    if (!stream->Read(&ev)) return grpc::Status::OK;
    if (!ev.has_hello()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be a hello");
    const rpc::AgentHello& h = ev.hello();
    if (h.node().empty() || h.node().size() > 128)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "node name must have 1 to 128 characters");
    if (h.devices().empty() || h.devices().size() > 4096)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "an agent must offer 1 to 4096 devices");
    std::set<int> distinct;
    for (int d : h.devices())
      if (d < 0 || !distinct.insert(d).second)
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "devices must be distinct and >= 0");
    auto agent = std::make_shared<Connected>();
    agent->info.node = h.node();
    agent->info.devices.assign(h.devices().begin(), h.devices().end());
    agent->info.cores.assign(h.cores().begin(), h.cores().end());
    agent->info.pid = h.pid();
    agent->info.peer = ctx->peer();
    agent->stream = stream;
    agent->ctx = ctx;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (shut_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the scheduler is shutting down");
      if (agents_.count(h.node()))
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "an agent named '" + h.node() + "' is connected");
      agents_[h.node()] = agent;
    }
    rpc::AgentCommand welcome;
    welcome.mutable_welcome();
    bool ok;
    {
      std::lock_guard<std::mutex> w(agent->write_mu);
      ok = stream->Write(welcome);
    }
    if (ok) {
      if (cb_.joined) cb_.joined(agent->info);
      while (stream->Read(&ev)) {
        if (ev.has_started()) {
          std::lock_guard<std::mutex> l(mu_);
          auto it = agent->pending.find(ev.started().start_id());
          if (it == agent->pending.end()) continue;  // its waiter gave up
          Pending& p = *it->second;
          p.done = true;
          p.error = ev.started().error();
          p.worker = {ev.started().address(), ev.started().pid()};
          if (p.error.empty() && p.worker.address.empty()) p.error = "the agent sent no worker address";
          agent->pending.erase(it);
          cv_.notify_all();
        } else if (ev.has_exited()) {
          if (cb_.worker_exited) cb_.worker_exited(agent->info.node, ev.exited().pid(), ev.exited().why());
        }
      }
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [id, p] : agent->pending) {
        p->done = true;
        p->error = "agent '" + agent->info.node + "' left";
      }
      agent->pending.clear();
      {
        std::lock_guard<std::mutex> w(agent->write_mu);
        agent->stream = nullptr;
      }
      agents_.erase(agent->info.node);
      cv_.notify_all();
    }
    if (ok && cb_.left) cb_.left(agent->info.node, ctx->IsCancelled() ? "stream cancelled" : "stream ended");
    return grpc::Status::OK;
  }

  StatusOr<RemoteWorker> StartWorker(const std::string& node, int tp, const std::vector<int>& devices,
                                     const std::string& model_dir, double timeout_s) {
    std::shared_ptr<Connected> agent;
    auto p = std::make_shared<Pending>();
    rpc::AgentCommand cmd;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = agents_.find(node);
      if (it == agents_.end()) return Unavailable("agent '" + node + "' is not connected");
      agent = it->second;
      const int64_t id = ++next_start_;
      agent->pending[id] = p;
      auto* s = cmd.mutable_start();
      s->set_start_id(id);
      s->set_tp(tp);
      for (int d : devices) s->add_devices(d);
      s->set_model_dir(model_dir);
    }
    {
      std::lock_guard<std::mutex> w(agent->write_mu);
      if (agent->stream == nullptr || !agent->stream->Write(cmd))
        return Unavailable("agent '" + node + "' is not connected");
    }
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, std::chrono::duration<double>(timeout_s), [&] { return p->done; })) {
      for (auto it = agent->pending.begin(); it != agent->pending.end(); ++it)
        if (it->second == p) {
          agent->pending.erase(it);
          break;
        }
      return DeadlineExceeded("agent '" + node + "' did not start the worker within " +
                              std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    if (!p->error.empty()) return Unavailable("agent '" + node + "': " + p->error);
    return p->worker;
  }

  void StopWorker(const std::string& node, int64_t pid) {
    std::shared_ptr<Connected> agent;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = agents_.find(node);
      if (it == agents_.end()) return;
      agent = it->second;
    }
    rpc::AgentCommand cmd;
    cmd.mutable_stop()->set_pid(pid);
    std::lock_guard<std::mutex> w(agent->write_mu);
    if (agent->stream != nullptr) agent->stream->Write(cmd);
  }

  std::vector<AgentInfo> Agents() const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<AgentInfo> out;
    for (const auto& [node, a] : agents_) out.push_back(a->info);
    return out;
  }

  void Shut() {
    std::lock_guard<std::mutex> l(mu_);
    shut_ = true;
    for (auto& [node, a] : agents_) a->ctx->TryCancel();
  }

 private:
  const std::string token_;
  const Callbacks cb_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Connected>> agents_;
  int64_t next_start_ = 0;
  bool shut_ = false;
};

StatusOr<std::unique_ptr<AgentHub>> AgentHub::Start(const std::string& listen, const std::string& token,
                                                    std::shared_ptr<grpc::ServerCredentials> credentials,
                                                    Callbacks callbacks) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgument("agent address must be host:port");
  std::unique_ptr<AgentHub> hub(new AgentHub());
  hub->service_ = std::make_unique<Service>(token, std::move(callbacks));
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not shared
  int port = 0;
  builder.AddListeningPort(listen, std::move(credentials), &port);
  builder.RegisterService(hub->service_.get());
  builder.SetMaxReceiveMessageSize(1 << 20);
  hub->server_ = builder.BuildAndStart();
  if (hub->server_ == nullptr || port == 0) return Unavailable("cannot listen for agents on " + listen);
  hub->address_ = listen.substr(0, colon) + ":" + std::to_string(port);
  return hub;
}

AgentHub::~AgentHub() { Shutdown(); }

const std::string& AgentHub::address() const { return address_; }

StatusOr<RemoteWorker> AgentHub::StartWorker(const std::string& node, int tp, const std::vector<int>& devices,
                                             const std::string& model_dir, double timeout_s) {
  return service_->StartWorker(node, tp, devices, model_dir, timeout_s);
}

void AgentHub::StopWorker(const std::string& node, int64_t pid) { service_->StopWorker(node, pid); }

std::vector<AgentInfo> AgentHub::Agents() const { return service_->Agents(); }

void AgentHub::Shutdown() {
  if (server_ == nullptr) return;
  service_->Shut();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
}

}  // namespace tediserve::serve
