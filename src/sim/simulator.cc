#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <cstdio>
#include <memory>
#include <queue>

#include "predictor/prediction_worker.h"
#include "predictor/step_predictor.h"

namespace tediserve::sim {
namespace {

using policy::Seconds;

struct StepDoneEvent {
  Seconds time;
  int64_t seq;
  policy::InstanceId instance;
  bool operator>(const StepDoneEvent& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

struct InFlight {
  std::vector<policy::StepOutcome> outcomes;
  std::vector<double> thresholds;
};

}  // namespace

StatusOr<SimResult> Simulate(const SimOptions& options, const policy::LatencyProfile& profile,
                             DenoiserModel& denoiser, const std::vector<policy::RequestSpec>& requests,
                             const AccuracyFn& accuracy, const MeasuredQualityFn& measured) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (requests.empty()) return InvalidArgument("workload: no requests");
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.id != static_cast<policy::RequestId>(i)) return InvalidArgument("requests must have ids 0..N-1 in order");
    if (i > 0 && r.arrival < requests[i - 1].arrival) return InvalidArgument("requests must be sorted by arrival");
    if (!(r.slo > 0)) return InvalidArgument("request " + std::to_string(i) + ": slo must be > 0");
    if (r.prompt_len <= 0 || r.output_len <= 0) return InvalidArgument("request " + std::to_string(i) + ": lengths must be > 0");
    if (options.policy.cache && r.output_len % options.policy.block_size != 0) {
      return InvalidArgument("request " + std::to_string(i) + ": output length " + std::to_string(r.output_len) +
                             " is not a multiple of the block size " + std::to_string(options.policy.block_size));
    }
  }

  std::unique_ptr<policy::StepEstimator> estimator;
  std::unique_ptr<predictor::StepPredictor> step_predictor, worker_predictor;
  predictor::TrainedEstimator* trained = nullptr;  // estimator, when it is the predictor
  std::unique_ptr<predictor::TrainedEstimator> worker_estimator;
  std::unique_ptr<predictor::PredictionWorker> worker;  // declared last: joins first
  if (options.estimator == "oneshot") {
    if (options.tokens_per_step.size() != options.policy.thresholds.size()) {
      return InvalidArgument("the one-shot estimator needs tokens per step for every candidate threshold");
    }
    estimator = std::make_unique<policy::OneShotEstimator>(options.policy.thresholds, options.tokens_per_step);
  } else if (options.estimator == "oracle") {
    estimator = std::make_unique<policy::OracleEstimator>(
        [&denoiser](policy::RequestId id, double c) { return denoiser.RemainingSteps(id, c); },
        options.oracle_refresh_tokens);
  } else if (options.estimator == "predictor") {
    if (options.tokens_per_step.size() != options.policy.thresholds.size()) {
      return InvalidArgument("the predictor's one-shot fallback needs tokens per step for every candidate threshold");
    }
    auto p = predictor::StepPredictor::Load(options.predictor_model);
    if (!p.ok()) return p.status().WithContext("policy.predictor");
    step_predictor = std::make_unique<predictor::StepPredictor>(std::move(*p));
    const int k = options.predictor_refresh_tokens >= 0 ? options.predictor_refresh_tokens : step_predictor->refresh_tokens();
    auto t = std::make_unique<predictor::TrainedEstimator>(
        step_predictor.get(), policy::OneShotEstimator(options.policy.thresholds, options.tokens_per_step), k);
    trained = t.get();
    estimator = std::move(t);
    if (options.predictor_async) {
      // The worker thread gets its own copy of the model (a StepPredictor is not shared
      // between threads); arrivals keep predicting inline on the first one.
      auto q = predictor::StepPredictor::Load(options.predictor_model);
      if (!q.ok()) return q.status().WithContext("policy.predictor");
      worker_predictor = std::make_unique<predictor::StepPredictor>(std::move(*q));
      worker_estimator = std::make_unique<predictor::TrainedEstimator>(
          worker_predictor.get(), policy::OneShotEstimator(options.policy.thresholds, options.tokens_per_step), k);
      worker = std::make_unique<predictor::PredictionWorker>(worker_estimator.get(), options.policy.thresholds);
    }
  } else {
    return InvalidArgument("policy.estimator: unknown \"" + options.estimator + "\" (expected oneshot, oracle, predictor)");
  }
  policy::PolicyOptions policy_options = options.policy;
  policy_options.async_predictions = worker != nullptr;
  ASSIGN_OR_RETURN(auto scheduler, policy::Scheduler::Create(policy_options, &profile, estimator.get(),
                                                             options.instances));
  // Async predictions: sent to the worker after each scheduler call, delivered to the
  // scheduler predictor_latency later in virtual time (the result does not depend on how
  // fast the thread really is, so runs stay deterministic).
  struct PendingPrediction {
    Seconds time;
    uint64_t ticket;
  };
  std::deque<PendingPrediction> predictions;
  auto send_predictions = [&](Seconds now) {
    if (worker == nullptr) return;
    std::vector<policy::RequestState> due = scheduler->TakePredictionRequests();
    if (due.empty()) return;
    predictions.push_back({now + options.predictor_latency, worker->Submit(std::move(due))});
  };
  std::unordered_map<policy::InstanceId, int> tp_of;
  for (const auto& i : options.instances) tp_of[i.id] = i.tp;

  SimResult result;
  result.requests.resize(requests.size());
  std::vector<double> quality_sum(requests.size(), 0.0), threshold_sum(requests.size(), 0.0);
  std::vector<int> steps(requests.size(), 0);
  std::vector<char> finished(requests.size(), 0);
  std::unordered_map<policy::InstanceId, InFlight> in_flight;
  std::priority_queue<StepDoneEvent, std::vector<StepDoneEvent>, std::greater<>> heap;
  int64_t seq = 0;
  size_t next_arrival = 0, num_finished = 0;
  std::vector<policy::Launch> launches;
  std::vector<DenoiseCommand> commands;

  auto start_launches = [&](Seconds now) {
    for (policy::Launch& l : launches) {
      commands.clear();
      InFlight f;
      for (const auto& c : l.batch) {
        commands.push_back({c.id, c.threshold});
        f.thresholds.push_back(c.threshold);
      }
      f.outcomes = denoiser.Step(commands);
      if (f.outcomes.size() != commands.size()) return Internal("denoiser returned a wrong number of outcomes");
      in_flight[l.instance] = std::move(f);
      heap.push({now + profile.StepSeconds(tp_of.at(l.instance), l.tokens), seq++, l.instance});
      ++result.steps;
      result.request_steps += static_cast<int64_t>(l.batch.size());
    }
    launches.clear();
    return Status::Ok();
  };

  // Timeline accumulators.
  Seconds next_sample = options.timeline_interval;
  int window_arrivals = 0, window_done = 0, window_met = 0;
  double window_latency = 0;
  Seconds next_tick = options.tick;
  Seconds now = 0;
  auto last_progress = wall_start;
  const Seconds horizon = requests.back().arrival;

  while (num_finished < requests.size()) {
    // The next event: a step coming back, an arrival, a tick, a timeline sample (in that
    // order at equal times).
    const Seconds t_step = heap.empty() ? 1e300 : heap.top().time;
    const Seconds t_arr = next_arrival < requests.size() ? requests[next_arrival].arrival : 1e300;
    const Seconds t_pred = predictions.empty() ? 1e300 : predictions.front().time;
    const Seconds t_min = std::min({t_step, t_arr, t_pred});
    if (t_min == 1e300) return Internal("simulation stalled with " + std::to_string(requests.size() - num_finished) +
                                        " unfinished requests and nothing running");
    if (next_sample <= t_min) {
      now = next_sample;
      TimelinePoint p;
      p.t = now;
      p.arrival_rps = window_arrivals / options.timeline_interval;
      p.active = static_cast<int>(scheduler->live());
      p.queued = static_cast<int>(scheduler->waiting());
      p.mean_threshold = scheduler->MeanThreshold();
      p.mean_cap = scheduler->MeanCap();
      p.window_attainment = window_done ? static_cast<double>(window_met) / window_done : 0;
      p.window_mean_latency = window_done ? window_latency / window_done : 0;
      result.timeline.push_back(p);
      window_arrivals = window_done = window_met = 0;
      window_latency = 0;
      next_sample += options.timeline_interval;
      continue;
    }
    if (next_tick <= t_min) {
      now = next_tick;
      next_tick += options.tick;
      scheduler->OnTick(now, &launches);
      RETURN_IF_ERROR(start_launches(now));
      send_predictions(now);
      ++result.events;
      continue;
    }
    ++result.events;
    if (t_pred <= t_step && t_pred <= t_arr) {
      now = t_pred;
      predictor::PredictionWorker::Result r = worker->Wait(predictions.front().ticket);
      predictions.pop_front();
      scheduler->OnPredictions(r.ids, r.predicted, now);
      RETURN_IF_ERROR(start_launches(now));
      continue;
    }
    if (t_step <= t_arr) {
      const StepDoneEvent ev = heap.top();
      heap.pop();
      now = ev.time;
      InFlight f = std::move(in_flight.at(ev.instance));
      in_flight.erase(ev.instance);
      for (size_t k = 0; k < f.outcomes.size(); ++k) {
        const policy::StepOutcome& o = f.outcomes[k];
        const size_t id = static_cast<size_t>(o.id);
        quality_sum[id] += o.unmasked * accuracy(f.thresholds[k]);
        threshold_sum[id] += o.unmasked * f.thresholds[k];
        steps[id] += 1;
        if (o.request_done && !finished[id]) {
          finished[id] = 1;
          ++num_finished;
          const policy::RequestSpec& spec = requests[id];
          RequestResult& rr = result.requests[id];
          rr.id = spec.id;
          rr.arrival = spec.arrival;
          rr.finish = now;
          rr.latency = now - spec.arrival;
          rr.slo = spec.slo;
          rr.met = rr.latency <= spec.slo;
          const policy::RequestState* st = scheduler->Find(spec.id);
          rr.migrations = st ? st->migrations : 0;
          rr.quality = quality_sum[id] / spec.output_len;
          if (measured) {
            if (auto q = measured(spec.id)) rr.quality = *q;
          }
          rr.mean_threshold = threshold_sum[id] / spec.output_len;
          rr.steps = steps[id];
          rr.priority = spec.priority;
          rr.prompt_len = spec.prompt_len;
          rr.output_len = spec.output_len;
          ++window_done;
          window_met += rr.met;
          window_latency += rr.latency;
        }
      }
      scheduler->OnStepDone(ev.instance, f.outcomes, now, &launches);
      for (const auto& o : f.outcomes) {
        if (o.request_done) denoiser.Finish(o.id);
      }
    } else {
      const policy::RequestSpec& spec = requests[next_arrival++];
      now = spec.arrival;
      denoiser.Start(spec, options.policy.block_size, options.seed * 0x100000001B3ull + static_cast<uint64_t>(spec.id));
      scheduler->OnArrival(spec, now, &launches);
      ++window_arrivals;
    }
    RETURN_IF_ERROR(start_launches(now));
    send_predictions(now);

    if (options.progress && (result.events & 0xFFFF) == 0) {
      const auto w = std::chrono::steady_clock::now();
      if (w - last_progress > std::chrono::seconds(2)) {
        last_progress = w;
        const double el = std::chrono::duration<double>(w - wall_start).count();
        std::fprintf(stderr, "  [sim] t=%.0fs of %.0fs, %zu/%zu done, %zu live, %.2fM events/s\n", now, horizon,
                     num_finished, requests.size(), scheduler->live(), result.events / el / 1e6);
      }
    }
  }
  // Migrations of finished requests were counted by the scheduler; record totals.
  result.scheduler_stats = scheduler->stats();
  if (trained != nullptr) result.predictor_fallbacks = trained->fallbacks();
  if (worker_estimator) result.predictor_fallbacks += worker_estimator->fallbacks();
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace tediserve::sim
