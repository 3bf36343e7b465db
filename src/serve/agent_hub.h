// The scheduler's side of Scheduler.Join (worker.proto): agents join, the runtime asks them to
// start and stop workers, and learns when an agent or one of its workers goes away
// (docs/design.md section 5). Callbacks run on gRPC threads; the runtime posts them to its loop.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tediserve::serve {

struct AgentInfo {
  std::string node;
  std::vector<int> devices;
  std::vector<int> cores;  // the core behind each device (CPU agents)
  int64_t pid = 0;
  std::string peer;  // gRPC's description of the agent's address
};

struct RemoteWorker {
  std::string address;  // host:port
  int64_t pid = 0;
};

class AgentHub {
 public:
  struct Callbacks {
    std::function<void(const AgentInfo&)> joined;
    std::function<void(const std::string& node, const std::string& why)> left;
    std::function<void(const std::string& node, int64_t pid, const std::string& why)> worker_exited;
  };

  // Listens on `listen` (host:port, port 0: any free one). Agents must present `token`.
  // `credentials`: TLS (Tls::ServerCredentials) or none.
  static StatusOr<std::unique_ptr<AgentHub>> Start(const std::string& listen, const std::string& token,
                                                   std::shared_ptr<grpc::ServerCredentials> credentials,
                                                   Callbacks callbacks);
  ~AgentHub();

  // host:port agents join.
  const std::string& address() const;
  // Asks `node`'s agent to start a worker and waits for its address (Unavailable when the
  // agent is not connected or leaves, DeadlineExceeded after timeout_s). Any thread but a
  // callback's.
  StatusOr<RemoteWorker> StartWorker(const std::string& node, int tp, const std::vector<int>& devices,
                                     const std::string& model_dir, double timeout_s);
  // Asks `node`'s agent to stop one of its workers; nothing when the agent is gone.
  void StopWorker(const std::string& node, int64_t pid);
  std::vector<AgentInfo> Agents() const;
  // Ends every agent's stream and stops listening.
  void Shutdown();

  class Service;

 private:
  AgentHub() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace tediserve::serve
