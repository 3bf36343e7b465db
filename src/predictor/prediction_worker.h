// Runs step predictions on a thread of their own, batched across requests and thresholds
// (docs/design.md section 3.3), so the scheduling thread only copies request states out and
// results back. One job = one batched call over its requests and
// all candidate thresholds. Jobs run in submission order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "policy/request_state.h"
#include "policy/step_estimator.h"

namespace tediserve::predictor {

class PredictionWorker {
 public:
  struct Result {
    std::vector<policy::RequestId> ids;
    std::vector<double> predicted;  // ids.size() x thresholds, row-major
  };

  // `estimator` is used only on the worker's thread from here on (not thread-safe itself).
  PredictionWorker(policy::StepEstimator* estimator, std::vector<double> thresholds);
  ~PredictionWorker();  // finishes queued jobs, then joins
  PredictionWorker(const PredictionWorker&) = delete;
  PredictionWorker& operator=(const PredictionWorker&) = delete;

  // Queues a job; returns its ticket (increasing from 1).
  uint64_t Submit(std::vector<policy::RequestState> states);
  // The job's result, waiting for it if needed; each ticket can be taken once (0 rows for
  // an unknown or already taken ticket).
  Result Wait(uint64_t ticket);
  // Non-blocking: true and the result if the job is done.
  bool TryTake(uint64_t ticket, Result* out);
  // Called on the worker thread after each job, with its ticket, so that a real event loop
  // can wake and TryTake the result instead of blocking in Wait (the simulator waits on
  // purpose: its virtual clock decides when a result arrives).
  void SetOnDone(std::function<void(uint64_t ticket)> on_done);

  int64_t jobs_done() const;
  double busy_seconds() const;  // time spent predicting on the worker thread

 private:
  void Loop();
  policy::StepEstimator* estimator_;
  const std::vector<double> thresholds_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::pair<uint64_t, std::vector<policy::RequestState>>> queue_;
  std::map<uint64_t, Result> done_;
  uint64_t next_ticket_ = 1;
  uint64_t running_ = 0;  // ticket being predicted, 0 when idle
  bool stop_ = false;
  std::function<void(uint64_t)> on_done_;
  int64_t jobs_done_ = 0;
  double busy_seconds_ = 0;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace tediserve::predictor
