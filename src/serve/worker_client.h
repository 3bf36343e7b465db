// The scheduler's end of one worker's stream (worker.proto): the loop thread queues batches
// and a writer thread sends them, so a worker that stops reading (stopped, hung, its flow
// control window full) never blocks the loop: its batch times out there like any other.
// Results come back on a reader thread, which hands them to callbacks (the runtime posts
// them to its loop). The stream ending, for any reason, is reported once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "serve/worker.grpc.pb.h"

namespace tediserve::serve {

class WorkerClient {
 public:
  using ResultFn = std::function<void(rpc::BatchResult)>;
  using ClosedFn = std::function<void(const std::string& why)>;

  // Connects, opens the stream and waits for the worker's Ready (at most timeout_s).
  // `credentials`: TLS (Tls::ChannelCredentials) or none.
  static StatusOr<std::unique_ptr<WorkerClient>> Connect(const std::string& address, const std::string& token,
                                                         std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                         double timeout_s, ResultFn on_result, ClosedFn on_closed);
  ~WorkerClient();

  // Queues the batch for the writer thread; never blocks on the worker. False when the
  // stream is known to be gone (on_closed has been or will be called); a write that fails
  // later ends the stream, which the reader reports through on_closed.
  bool Send(const rpc::StepBatch& batch);
  const rpc::Ready& ready() const { return ready_; }
  // Cancels the stream and joins the reader; on_closed is not called after Close returns.
  void Close();

 private:
  WorkerClient() = default;
  void ReadLoop();
  void WriteLoop();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpc::Worker::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<rpc::WorkerCommand, rpc::WorkerEvent>> stream_;
  rpc::Ready ready_;
  ResultFn on_result_;
  ClosedFn on_closed_;
  std::thread reader_;
  std::thread writer_;
  std::mutex write_mu_;
  std::condition_variable write_cv_;
  std::deque<rpc::WorkerCommand> outbox_;  // guarded by write_mu_
  bool write_failed_ = false;              // guarded by write_mu_
  std::atomic<bool> closing_{false};
};

}  // namespace tediserve::serve
