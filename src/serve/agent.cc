#include "serve/agent.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "serve/launcher.h"
#include "serve/worker.grpc.pb.h"

namespace tediserve::serve {
namespace {

using Stream = grpc::ClientReaderWriter<rpc::AgentEvent, rpc::AgentCommand>;

class Agent {
 public:
  Agent(AgentOptions o, std::shared_ptr<grpc::ChannelCredentials> credentials)
      : o_(std::move(o)), credentials_(std::move(credentials)) {}

  Status Run() {
    std::thread monitor([this] { Monitor(); });
    Status result;
    bool warned = false;
    while (!stopping()) {
      const Status s = Session(&warned);
      if (!s.ok()) {
        result = s;
        break;
      }
      StopAllWorkers();
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::duration<double>(o_.retry_s), [&] { return stop_; });
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    monitor.join();
    StopAllWorkers();
    for (auto& t : tasks_)
      if (t.joinable()) t.join();
    return result;
  }

  void RequestStop() {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
    cv_.notify_all();
  }

 private:
  bool stopping() {
    std::lock_guard<std::mutex> l(mu_);
    return stop_;
  }

  // One connection to the scheduler, until it ends. Not OK only for a refusal retrying
  // cannot fix.
  Status Session(bool* warned) {
    // A channel of its own each session, with its own subchannels (the global pool would carry
    // the reconnect backoff of failed attempts over, growing to minutes) and a backoff no longer
    // than the retry period.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    const int backoff_ms = std::max(50, static_cast<int>(o_.retry_s * 1000));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_ms);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, backoff_ms);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, std::max(backoff_ms, 1000));
    auto channel = grpc::CreateCustomChannel(o_.join, credentials_, args);
    auto stub = rpc::Scheduler::NewStub(channel);
    grpc::ClientContext ctx;
    if (!o_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + o_.token);
    int64_t session = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return Status::Ok();
      ctx_ = &ctx;
      session = ++session_;
    }
    std::unique_ptr<Stream> stream = stub->Join(&ctx);
    rpc::AgentEvent hello;
    auto* h = hello.mutable_hello();
    h->set_node(o_.node);
    for (size_t d = 0; d < o_.cores.size(); ++d) {
      h->add_devices(static_cast<int>(d));
      h->add_cores(o_.cores[d]);
    }
    h->set_pid(getpid());
    h->set_model(o_.model_dir);
    bool joined = false;
    if (stream->Write(hello)) {
      {
        std::lock_guard<std::mutex> l(write_mu_);
        stream_ = stream.get();
      }
      rpc::AgentCommand cmd;
      while (stream->Read(&cmd)) {
        if (cmd.has_welcome()) {
          joined = true;
          *warned = false;
          std::cout << "tediserve-agent joined " << o_.join << " as " << o_.node << " (" << o_.cores.size()
                    << " devices)" << std::endl;
        } else if (cmd.has_start()) {
          tasks_.emplace_back([this, s = cmd.start(), session] { Start(s, session); });
        } else if (cmd.has_stop()) {
          const int64_t pid = cmd.stop().pid();
          tasks_.emplace_back([this, pid] { Stop(pid); });
        }
      }
      std::lock_guard<std::mutex> l(write_mu_);
      stream_ = nullptr;
    }
    const grpc::Status st = stream->Finish();
    {
      std::lock_guard<std::mutex> l(mu_);
      ctx_ = nullptr;
      ++session_;  // a worker that finishes starting now belongs to no scheduler: it is stopped
    }
    if (stopping()) return Status::Ok();
    const auto code = st.error_code();
    if (code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::INVALID_ARGUMENT ||
        code == grpc::StatusCode::PERMISSION_DENIED)
      return FailedPrecondition("the scheduler at " + o_.join + " refused this agent: " + st.error_message());
    if (joined) {
      std::cerr << "tediserve-agent: lost the scheduler at " << o_.join << " (" << st.error_message()
                << "); stopping its workers and joining again" << std::endl;
    } else if (!*warned) {
      std::cerr << "tediserve-agent: cannot join " << o_.join << " (" << st.error_message() << "); retrying every "
                << o_.retry_s << " s";
      // Refused: nobody listens there yet. Anything else may be a TLS mismatch, which gRPC
      // reports only as a closed socket or a handshake failure.
      if (st.error_message().find("Connection refused") == std::string::npos)
        std::cerr << (o_.tls.enabled() ? " (with TLS, the scheduler's certificate must be signed by --tls-ca and "
                                         "name that address, and ours by the scheduler's CA)"
                                       : " (if the scheduler was started with --tls-*, this agent needs them too)");
      std::cerr << std::endl;
      *warned = true;
    }
    return Status::Ok();
  }

  void Write(const rpc::AgentEvent& ev) {
    std::lock_guard<std::mutex> l(write_mu_);
    if (stream_ != nullptr) stream_->Write(ev);
  }

  void Start(const rpc::StartWorker& s, int64_t session) {
    rpc::AgentEvent ev;
    auto* r = ev.mutable_started();
    r->set_start_id(s.start_id());
    std::vector<int> devices(s.devices().begin(), s.devices().end());
    std::set<int> distinct(devices.begin(), devices.end());
    bool ok = s.tp() >= 1 && static_cast<int>(devices.size()) == s.tp() && distinct.size() == devices.size();
    std::vector<int> cores;
    for (int d : devices) {
      ok = ok && d >= 0 && d < static_cast<int>(o_.cores.size());
      if (ok) cores.push_back(o_.cores[static_cast<size_t>(d)]);
    }
    if (!ok) {
      r->set_error("start: need tp >= 1 distinct devices in [0, " + std::to_string(o_.cores.size()) + "), got tp " +
                   std::to_string(s.tp()) + " on devices " + JoinInts(devices));
      return Write(ev);
    }
    WorkerLaunch wl;
    wl.exe = o_.exe;
    wl.model_dir = o_.model_dir.empty() ? s.model_dir() : o_.model_dir;
    wl.tp = s.tp();
    wl.cores = cores;
    wl.token = o_.token;
    wl.host = o_.worker_host;
    wl.tls = o_.tls;
    StatusOr<ChildProcess> c = wl.model_dir.empty() ? StatusOr<ChildProcess>(InvalidArgument("no model folder"))
                                                    : LaunchWorker(wl);
    if (!c.ok()) {
      r->set_error(c.status().message());
      return Write(ev);
    }
    r->set_address(c->ready);
    r->set_pid(c->pid);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_ || session != session_) {
        ChildProcess p = *c;
        StopChild(&p, 0.5);
        return;
      }
      workers_[c->pid] = *c;
    }
    Write(ev);
  }

  void Stop(int64_t pid) {
    ChildProcess c;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = workers_.find(static_cast<pid_t>(pid));
      if (it == workers_.end()) return;
      c = it->second;
      workers_.erase(it);
    }
    StopChild(&c);
  }

  void StopAllWorkers() {
    std::map<pid_t, ChildProcess> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      all.swap(workers_);
    }
    for (auto& [pid, c] : all) StopChild(&c, 1);
  }

  // Reports workers that exit on their own.
  void Monitor() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      cv_.wait_for(l, std::chrono::milliseconds(100), [&] { return stop_; });
      std::vector<pid_t> gone;
      for (auto& [pid, c] : workers_)
        if (!ChildAlive(&c)) gone.push_back(pid);
      for (pid_t pid : gone) workers_.erase(pid);
      if (gone.empty()) continue;
      l.unlock();
      for (pid_t pid : gone) {
        rpc::AgentEvent ev;
        ev.mutable_exited()->set_pid(pid);
        ev.mutable_exited()->set_why("worker process exited");
        Write(ev);
      }
      l.lock();
    }
  }

  AgentOptions o_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // TLS to the scheduler, or none
  std::mutex mu_;  // stop_, ctx_, workers_
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t session_ = 0;  // bumped when a session starts and ends
  grpc::ClientContext* ctx_ = nullptr;
  std::map<pid_t, ChildProcess> workers_;
  std::mutex write_mu_;
  Stream* stream_ = nullptr;
  std::vector<std::thread> tasks_;  // only the session thread adds
};

}  // namespace

Status RunAgent(AgentOptions o, bool exit_on_stdin_eof) {
  if (o.join.empty() || o.join.find(':') == std::string::npos)
    return InvalidArgument("--join must be the scheduler's agent address, host:port");
  if (o.node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0) return InvalidArgument("--node: no host name");
    o.node = host;
  }
  if (o.node.size() > 128) return InvalidArgument("--node: at most 128 characters");
  if (o.cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return Internal("sched_getaffinity failed");
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) o.cores.push_back(c);
  }
  for (int c : o.cores)
    if (c < 0 || c >= CPU_SETSIZE) return InvalidArgument("--cores: core " + std::to_string(c) + " out of range");
  if (o.cores.size() > 4096) return InvalidArgument("--cores: at most 4096 devices");
  if (o.exe.empty()) o.exe = SelfExe();
  if (!(o.retry_s > 0)) return InvalidArgument("--retry-seconds must be > 0");
  ASSIGN_OR_RETURN(const Tls tls, Tls::Load(o.tls));
  o.tls = tls.files();  // absolute paths, for the workers it starts

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  Agent agent(o, tls.ChannelCredentials());
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    agent.RequestStop();
  });
  signals.detach();
  if (exit_on_stdin_eof) {
    std::thread watch([&] {
      char buf[256];
      while (read(0, buf, sizeof buf) > 0) {
      }
      agent.RequestStop();
    });
    watch.detach();
  }
  return agent.Run();
}

}  // namespace tediserve::serve
