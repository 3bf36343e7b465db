// The scheduler's end of one worker's stream (worker.proto). A batch is written by the thread
// that sends it when that cannot block: it is small, no other write is under way and the
// worker has read almost everything sent before (what it has not answered stays far below
// the stream's flow-control window). Otherwise a writer thread sends it, so a worker that
// stops reading (stopped, hung, its window full) never blocks the sender: its batch times out
// there like any other. Results come back on a reader thread, which hands them to callbacks.
// The stream ending, for any reason, is reported once.
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

  // Writes the batch, or queues it for the writer thread; never blocks on the worker. False
  // when the stream is known to be gone (on_closed has been or will be called); a write that
  // fails later ends the stream, which the reader reports through on_closed.
  bool Send(const rpc::StepBatch& batch);
  // Writes on the caller's thread: messages up to this size, while the worker has answered
  // all but this many bytes of what was sent (the window is 64 KiB at least).
  static constexpr size_t kDirectWriteBytes = 16 << 10, kDirectUnansweredBytes = 32 << 10;
  const rpc::Ready& ready() const { return ready_; }
  // Cancels the stream and joins the reader; on_closed is not called after Close returns.
  // Called on the reader thread (from a callback) it does not join the reader: the client
  // must then be closed again, and destroyed, on another thread.
  void Close();
  bool OnReaderThread() const { return std::this_thread::get_id() == reader_.get_id(); }

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
  bool writing_ = false;                   // a Write is under way (guarded by write_mu_)
  size_t unanswered_bytes_ = 0;            // sent since the last result came (guarded by write_mu_)
  std::atomic<bool> closing_{false};
};

}  // namespace tediserve::serve
