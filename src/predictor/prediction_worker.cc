#include "predictor/prediction_worker.h"

#include <chrono>

namespace tediserve::predictor {

PredictionWorker::PredictionWorker(policy::StepEstimator* estimator, std::vector<double> thresholds)
    : estimator_(estimator), thresholds_(std::move(thresholds)), thread_([this] { Loop(); }) {}

PredictionWorker::~PredictionWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t PredictionWorker::Submit(std::vector<policy::RequestState> states) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    queue_.emplace_back(ticket, std::move(states));
  }
  work_cv_.notify_one();
  return ticket;
}

void PredictionWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    auto [ticket, states] = std::move(queue_.front());
    queue_.pop_front();
    running_ = ticket;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    Result r;
    std::vector<const policy::RequestState*> ptrs;
    ptrs.reserve(states.size());
    for (const auto& s : states) {
      ptrs.push_back(&s);
      r.ids.push_back(s.spec.id);
    }
    r.predicted.resize(states.size() * thresholds_.size());
    estimator_->PredictBatch(ptrs, thresholds_, r.predicted);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    busy_seconds_ += dt;
    ++jobs_done_;
    running_ = 0;
    done_.emplace(ticket, std::move(r));
    done_cv_.notify_all();
    if (on_done_) {
      // Outside the lock: the callback may call TryTake (e.g. to post an event to its loop).
      std::function<void(uint64_t)> cb = on_done_;
      lock.unlock();
      cb(ticket);
      lock.lock();
    }
  }
}

void PredictionWorker::SetOnDone(std::function<void(uint64_t ticket)> on_done) {
  std::lock_guard<std::mutex> lock(mu_);
  on_done_ = std::move(on_done);
}

PredictionWorker::Result PredictionWorker::Wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto pending = [&] {
    if (running_ == ticket) return true;
    for (const auto& q : queue_)
      if (q.first == ticket) return true;
    return false;
  };
  done_cv_.wait(lock, [&] { return done_.count(ticket) > 0 || !pending(); });
  auto it = done_.find(ticket);
  if (it == done_.end()) return {};
  Result r = std::move(it->second);
  done_.erase(it);
  return r;
}

bool PredictionWorker::TryTake(uint64_t ticket, Result* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = done_.find(ticket);
  if (it == done_.end()) return false;
  *out = std::move(it->second);
  done_.erase(it);
  return true;
}

int64_t PredictionWorker::jobs_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_done_;
}

double PredictionWorker::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_seconds_;
}

}  // namespace tediserve::predictor
