#include "serve/worker_client.h"

#include <chrono>

#include "serve/monotonic.h"

namespace tediserve::serve {

StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Connect(const std::string& address, const std::string& token,
                                                              std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                              double timeout_s, ResultFn on_result,
                                                              ClosedFn on_closed) {
  std::unique_ptr<WorkerClient> c(new WorkerClient());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  c->channel_ = grpc::CreateCustomChannel(address, std::move(credentials), args);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                std::chrono::duration<double>(timeout_s));
  if (!c->channel_->WaitForConnected(deadline)) return Unavailable("worker at " + address + " does not answer");
  c->stub_ = rpc::Worker::NewStub(c->channel_);
  if (!token.empty()) c->ctx_.AddMetadata("authorization", "Bearer " + token);
  c->stream_ = c->stub_->Run(&c->ctx_);
  rpc::WorkerEvent ev;
  if (!c->stream_->Read(&ev) || !ev.has_ready()) {
    grpc::Status s = c->stream_->Finish();
    return Unavailable("worker at " + address + " refused the stream: " +
                       (s.ok() ? std::string("no Ready message") : s.error_message()));
  }
  c->ready_ = ev.ready();
  c->on_result_ = std::move(on_result);
  c->on_closed_ = std::move(on_closed);
  c->reader_ = std::thread([p = c.get()] { p->ReadLoop(); });
  c->writer_ = std::thread([p = c.get()] { p->WriteLoop(); });
  return c;
}

WorkerClient::~WorkerClient() { Close(); }

void WorkerClient::ReadLoop() {
  rpc::WorkerEvent ev;
  while (stream_->Read(&ev)) {
    if (ev.has_result()) {
      std::lock_guard<std::mutex> l(write_mu_);
      unanswered_bytes_ = 0;  // the worker read every batch before this one's
    }
    if (ev.has_result() && !closing_) {
      ev.mutable_result()->set_scheduler_received_ns(MonotonicNs());
      on_result_(std::move(*ev.mutable_result()));
    }
  }
  grpc::Status s = stream_->Finish();
  if (!closing_) on_closed_(s.ok() ? "the worker closed its stream" : s.error_message());
}

bool WorkerClient::Send(const rpc::StepBatch& batch) {
  rpc::WorkerCommand cmd;
  *cmd.mutable_batch() = batch;
  const size_t bytes = cmd.ByteSizeLong();
  std::unique_lock<std::mutex> l(write_mu_);
  if (write_failed_ || closing_) return false;
  const bool direct = !writing_ && outbox_.empty() && bytes <= kDirectWriteBytes &&
                      unanswered_bytes_ + bytes <= kDirectUnansweredBytes;
  unanswered_bytes_ += bytes;
  if (!direct) {
    outbox_.push_back(std::move(cmd));
    write_cv_.notify_one();
    return true;
  }
  writing_ = true;
  l.unlock();
  const bool ok = stream_->Write(cmd);  // far below the window: the transport takes it at once
  l.lock();
  writing_ = false;
  if (!ok) {  // the stream is broken; the reader sees it end and reports it
    write_failed_ = true;
    outbox_.clear();
  } else if (!outbox_.empty()) {
    write_cv_.notify_one();  // queued behind this write
  }
  return true;
}

void WorkerClient::WriteLoop() {
  std::unique_lock<std::mutex> l(write_mu_);
  while (true) {
    write_cv_.wait(l, [&] { return closing_ || write_failed_ || (!outbox_.empty() && !writing_); });
    if (closing_ || write_failed_) return;
    const rpc::WorkerCommand cmd = std::move(outbox_.front());
    outbox_.pop_front();
    writing_ = true;
    l.unlock();
    const bool ok = stream_->Write(cmd);  // blocks while the worker does not read
    l.lock();
    writing_ = false;
    if (!ok) {  // the stream is broken; the reader sees it end and reports it
      write_failed_ = true;
      outbox_.clear();
      return;
    }
  }
}

void WorkerClient::Close() {
  // On the reader thread itself (a result's callback that closes this client) the reader
  // cannot be joined: it stops on its own, and a later Close from another thread joins it.
  const bool on_reader = OnReaderThread();
  if (closing_.exchange(true)) {
    if (reader_.joinable() && !on_reader) reader_.join();
    if (writer_.joinable()) writer_.join();
    return;
  }
  {
    std::lock_guard<std::mutex> l(write_mu_);  // the writer sees closing_ on its next wait
    write_cv_.notify_all();
  }
  ctx_.TryCancel();  // unblocks a Write or Read in progress
  if (reader_.joinable() && !on_reader) reader_.join();
  if (writer_.joinable()) writer_.join();
}

}  // namespace tediserve::serve
