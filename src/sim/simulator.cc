#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>

namespace tediserve::sim {
namespace {

using policy::Seconds;

// Counter-based randomness: a draw depends on (seed, stream, index) only, not on the order
// in which events happen, so faults and step-time errors do not perturb each other.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t h = Mix(Mix(seed ^ (stream * 0xD1B54A32D192ED03ull)) + index);
  return ((h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // in (0, 1)
}
double StandardNormal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = Uniform(seed, stream, 2 * index), u2 = Uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}
// With nothing running and nothing left to arrive, live requests wait at most this long after
// the last arrival for an instance to come back before they are reported failed.
constexpr Seconds kGiveUpAfter = 3600;

enum Stream : uint64_t { kStepTime = 1, kStepFailure, kCancelWho, kCancelWhen, kFaultPick, kFaultTime, kPoisson };

struct StepDoneEvent {
  Seconds time;
  int64_t seq;
  policy::BatchId batch;
  bool operator>(const StepDoneEvent& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

struct FaultEvent {
  enum Kind { kFail, kDrain, kAdd, kCancel, kPlan, kLaunch } kind;
  Seconds time;
  int64_t seq;
  int64_t target;         // instance id, or request id (kCancel)
  Seconds back_after = 0;  // kFail, kDrain: when the instance is added back
  bool operator>(const FaultEvent& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

Status ValidateFaults(const FaultOptions& f, size_t instances) {
  if (f.random_failures < 0 || f.random_drains < 0) return InvalidArgument("faults: counts must be >= 0");
  if (static_cast<size_t>(f.random_failures + f.random_drains) > instances) {
    return InvalidArgument("faults: " + std::to_string(f.random_failures + f.random_drains) +
                           " failing or draining instances, but the cluster has " + std::to_string(instances));
  }
  for (double p : {f.step_failure_probability, f.cancel_fraction}) {
    if (!(p >= 0 && p <= 1)) return InvalidArgument("faults: probabilities must be in [0, 1]");
  }
  for (double t : {f.window_from, f.window_to, f.recover_after, f.readd_after, f.failure_rate_per_hour}) {
    if (!(t >= 0) || !std::isfinite(t)) return InvalidArgument("faults: times and rates must be finite and >= 0");
  }
  for (const auto& e : f.events) {
    if (!(e.time >= 0) || !std::isfinite(e.time) || !(e.back_after >= 0) || !std::isfinite(e.back_after)) {
      return InvalidArgument("faults.events: times must be finite and >= 0");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SimResult> Simulate(const SimOptions& options, const policy::LatencyProfile& profile,
                             DenoiserModel& denoiser, const std::vector<policy::RequestSpec>& requests,
                             const AccuracyFn& accuracy, const MeasuredQualityFn& measured) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (requests.empty()) return InvalidArgument("workload: no requests");
  if (options.instances.empty()) return InvalidArgument("cluster: no instances");
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.id != static_cast<policy::RequestId>(i)) return InvalidArgument("requests must have ids 0..N-1 in order");
    if (i > 0 && r.arrival < requests[i - 1].arrival) return InvalidArgument("requests must be sorted by arrival");
  }
  if (!(options.step_time_sigma >= 0) || options.step_time_sigma > 3) {
    return InvalidArgument("truth.step_time_sigma: must be in [0, 3]");
  }
  RETURN_IF_ERROR(ValidateFaults(options.faults, options.instances.size()));
  std::optional<Reconfigurator> reconf;
  if (options.reconfig.enabled) {
    if (options.faults.any()) return InvalidArgument("reconfig: not supported together with faults (yet)");
    ASSIGN_OR_RETURN(Reconfigurator rc,
                     Reconfigurator::Create(options.reconfig, &profile, options.policy.thresholds, options.tokens_per_step,
                                            options.policy.block_size, options.policy.token_budget));
    reconf.emplace(std::move(rc));
  }
  const policy::LatencyProfile& truth = options.truth_profile != nullptr ? *options.truth_profile : profile;
  for (const auto& i : options.instances) {
    if (!truth.HasTp(i.tp)) {
      return InvalidArgument("truth.profile: TP degree " + std::to_string(i.tp) + " is not in " + truth.source());
    }
  }

  host::HostOptions ho;
  ho.policy = options.policy;
  ho.instances = options.instances;
  ho.estimator.kind = options.estimator;
  ho.estimator.oracle_refresh_tokens = options.oracle_refresh_tokens;
  ho.estimator.predictor_model = options.predictor_model;
  ho.estimator.predictor_refresh_tokens = options.predictor_refresh_tokens;
  ho.estimator.predictor_async = options.predictor_async;
  ho.estimator.tokens_per_step = options.tokens_per_step;
  ho.slo_seconds = options.slo_seconds;
  ho.slo_scale = options.slo_scale;
  // Asynchronous predictions are delivered predictor_latency later in virtual time (the
  // result does not depend on how fast the thread really is, so runs stay deterministic).
  ho.prediction_delay = options.predictor_latency;
  ho.accuracy = accuracy;
  ho.measured = measured;
  ASSIGN_OR_RETURN(auto host, host::Host::Create(
                                  std::move(ho), &profile,
                                  [&denoiser](policy::RequestId id, double c) { return denoiser.RemainingSteps(id, c); }));

  std::unordered_map<policy::InstanceId, policy::InstanceInfo> info_of;
  for (const auto& i : options.instances) info_of[i.id] = i;

  SimResult result;
  result.requests.resize(requests.size());
  std::vector<char> left(requests.size(), 0);
  std::priority_queue<StepDoneEvent, std::vector<StepDoneEvent>, std::greater<>> heap;
  std::priority_queue<FaultEvent, std::vector<FaultEvent>, std::greater<>> faults;
  int64_t seq = 0, fault_seq = 0;
  size_t next_arrival = 0, num_left = 0;
  const FaultOptions& fo = options.faults;
  const uint64_t fseed = options.seed * 0x2545F4914F6CDD1Dull + 0x7F4A7C15ull;
  const Seconds horizon = requests.back().arrival;

  // Faults at given times, at random times on distinct random instances, and Poisson ones.
  for (const auto& e : fo.events) {
    faults.push({e.drain ? FaultEvent::kDrain : FaultEvent::kFail, e.time, fault_seq++, e.instance, e.back_after});
  }
  {
    std::vector<policy::InstanceId> pool;
    for (const auto& i : options.instances) pool.push_back(i.id);
    const Seconds from = fo.window_from, to = fo.window_to > 0 ? fo.window_to : horizon;
    const int picks = fo.random_failures + fo.random_drains;
    for (int k = 0; k < picks; ++k) {  // partial Fisher-Yates: distinct instances
      const size_t j = k + static_cast<size_t>(Uniform(fseed, kFaultPick, k) * (pool.size() - k));
      std::swap(pool[k], pool[std::min(j, pool.size() - 1)]);
      const Seconds t = from + Uniform(fseed, kFaultTime, k) * std::max(0.0, to - from);
      const bool drain = k >= fo.random_failures;
      faults.push({drain ? FaultEvent::kDrain : FaultEvent::kFail, t, fault_seq++, pool[k],
                   drain ? fo.readd_after : fo.recover_after});
    }
    if (fo.failure_rate_per_hour > 0) {
      const double rate = fo.failure_rate_per_hour / 3600;
      int64_t n = 0;
      for (const auto& i : options.instances) {
        Seconds t = from;
        while (true) {
          t += -std::log(Uniform(fseed, kPoisson, n++)) / rate;
          if (t >= to) break;
          faults.push({FaultEvent::kFail, t, fault_seq++, i.id, fo.recover_after});
        }
      }
    }
  }

  // Reconfiguration state: the instances accepting work, the plan steps still to run, and
  // what the executor waits for (one step at a time: a drain to finish or a launch to load).
  std::map<policy::InstanceId, policy::InstanceInfo> live;
  for (const auto& i : options.instances) live[i.id] = i;
  policy::InstanceId next_instance_id = 0;
  for (const auto& i : options.instances) next_instance_id = std::max(next_instance_id, i.id + 1);
  std::vector<plan::PlanStep> pending;
  size_t pending_at = 0;
  bool exec_busy = false;
  std::set<policy::InstanceId> reconfig_draining;
  auto sample_layout = [&](Seconds t) {
    SimResult::LayoutPoint lp;
    lp.time = t;
    for (const auto& [id, i] : live)
      if (!reconfig_draining.count(id)) ++lp.layout[i.tp];
    result.layouts.push_back(std::move(lp));
  };
  if (reconf) {
    sample_layout(0);
    faults.push({FaultEvent::kPlan, options.reconfig.period_s, fault_seq++, 0, 0});
  }
  // Starts the next plan step unless one is under way.
  auto advance = [&](Seconds now) -> Status {
    while (!exec_busy && pending_at < pending.size()) {
      const plan::PlanStep st = pending[pending_at++];
      if (st.kind == plan::PlanStep::kTerminate) {
        const auto id = static_cast<policy::InstanceId>(st.instance.id);
        if (!live.count(id)) continue;
        RETURN_IF_ERROR(host->DrainInstance(id, now));
        reconfig_draining.insert(id);
        exec_busy = true;
        sample_layout(now);
      } else {
        policy::InstanceInfo info{next_instance_id++, st.instance.tp, st.instance.node, st.instance.gpus};
        info_of[info.id] = info;
        faults.push({FaultEvent::kLaunch, now + options.reconfig.load_delay_s, fault_seq++, info.id, 0});
        exec_busy = true;
      }
    }
    return Status::Ok();
  };

  std::vector<DenoiseCommand> commands;
  std::vector<policy::StepOutcome> outcomes;
  // Batches of several steps (PolicyOptions::batch_steps) run step by step: each step's
  // outcomes decide who is in the next one and what it pushes; the host hears of the batch
  // once, after its last. (A batch lost with its instance after some of its steps leaves the
  // denoiser ahead of the scheduler for its requests: the next steps continue from there.)
  struct MultiStep {
    int done = 0;                                // steps run
    std::vector<policy::StepOutcome> outcomes;   // of every step so far, in order
    std::unordered_map<policy::RequestId, int> next_tokens;  // requests still running
  };
  std::unordered_map<policy::BatchId, MultiStep> multi;
  // A step of `tokens` on `instance` from `now`: the truth's time, this run's factor, and
  // the noise of step `k` of `batch`.
  auto step_time = [&](policy::InstanceId instance, double tokens, Seconds now, policy::BatchId batch, int k) {
    Seconds d = truth.StepSeconds(info_of.at(instance).tp, tokens);
    if (options.step_time_factor) d *= options.step_time_factor(now);
    if (options.step_time_sigma > 0) {
      const double s = options.step_time_sigma;
      const auto index = static_cast<uint64_t>(batch) + (static_cast<uint64_t>(k) << 48);
      d *= std::exp(s * StandardNormal(fseed, kStepTime, index) - 0.5 * s * s);
    }
    return d;
  };
  // Runs what the host decided: step batches onto the heap, records of requests that left,
  // drained instances stopped (and scheduled to come back).
  auto absorb = [&](Seconds now) -> Status {
    host::HostOutput& out = host->output();
    while (!out.batches.empty() || !out.left.empty() || !out.drained.empty()) {
      host::HostOutput o = std::move(out);
      out.clear();
      for (const policy::StepBatch& b : o.batches) {
        ++result.batches;
        result.batch_requests += static_cast<int64_t>(b.commands.size());
        if (b.steps > 1) {  // its first step; the rest follow from what each step did
          multi[b.id] = MultiStep{};
          heap.push({now + options.batch_overhead + step_time(b.instance, b.tokens, now, b.id, 0), seq++, b.id});
          continue;
        }
        heap.push({now + step_time(b.instance, b.tokens, now, b.id, 0) + options.batch_overhead, seq++, b.id});
        ++result.steps;
        result.request_steps += static_cast<int64_t>(b.commands.size());
      }
      for (host::RequestRecord& r : o.left) {
        const size_t id = static_cast<size_t>(r.id);
        if (id >= left.size() || left[id]) return Internal("request " + std::to_string(r.id) + " left twice");
        left[id] = 1;
        ++num_left;
        denoiser.Finish(r.id);
        result.cancellations += r.outcome == host::Outcome::kCancelled;
        result.requests[id] = std::move(r);
      }
      for (policy::InstanceId id : o.drained) {
        if (reconfig_draining.count(id)) {  // a plan step: gone for good, next step
          RETURN_IF_ERROR(host->RemoveInstance(id, now, false));
          reconfig_draining.erase(id);
          live.erase(id);
          ++result.reconfig_terminations;
          exec_busy = false;
          RETURN_IF_ERROR(advance(now));
          continue;
        }
        RETURN_IF_ERROR(host->RemoveInstance(id, now, false));
        ++result.drains;
        Seconds back = fo.readd_after;
        for (const auto& e : fo.events) {
          if (e.instance == id && e.drain) back = e.back_after;
        }
        faults.push({FaultEvent::kAdd, now + back, fault_seq++, id, 0});
      }
    }
    return Status::Ok();
  };

  Seconds next_sample = options.timeline_interval;
  Seconds next_tick = options.tick;
  Seconds now = 0;
  auto last_progress = wall_start;

  while (num_left < requests.size()) {
    // The next event: a timeline sample, a tick, then a prediction coming back, a step coming
    // back, an arrival, a fault (in that order at equal times).
    const Seconds t_step = heap.empty() ? 1e300 : heap.top().time;
    const Seconds t_arr = next_arrival < requests.size() ? requests[next_arrival].arrival : 1e300;
    const Seconds t_pred = std::min(host->NextPredictionDue(), 1e300);
    const Seconds t_fault = faults.empty() ? 1e300 : faults.top().time;
    const Seconds t_min = std::min({t_step, t_arr, t_pred, t_fault});
    // Nothing can happen any more, or only an instance's return long after the last arrival:
    // the requests still live have no instance to run on.
    const bool idle = heap.empty() && next_arrival == requests.size() && t_pred == 1e300;
    if (t_min == 1e300 || (idle && t_min > horizon + kGiveUpAfter)) {
      RETURN_IF_ERROR(host->FailAll(now, "no instance was left to run it"));
      RETURN_IF_ERROR(absorb(now));
      if (num_left < requests.size()) {
        return Internal("simulation stalled with " + std::to_string(requests.size() - num_left) +
                        " requests unaccounted for");
      }
      break;
    }
    if (next_sample <= t_min) {
      now = next_sample;
      result.timeline.push_back(host->SampleTimeline(now, options.timeline_interval));
      next_sample += options.timeline_interval;
      continue;
    }
    if (next_tick <= t_min && host->scheduler().accepting_instances() == 0) {
      // No instance takes work: housekeeping cannot change anything until one is back.
      while (next_tick <= t_min) next_tick += options.tick;
    }
    if (next_tick <= t_min) {
      now = next_tick;
      next_tick += options.tick;
      RETURN_IF_ERROR(host->Tick(now));
      RETURN_IF_ERROR(absorb(now));
      ++result.events;
      continue;
    }
    ++result.events;
    if (t_pred <= t_step && t_pred <= t_arr && t_pred <= t_fault) {
      now = t_pred;
      RETURN_IF_ERROR(host->DeliverNextPrediction(now, /*wait=*/true).status());
    } else if (t_step <= t_arr && t_step <= t_fault) {
      const StepDoneEvent ev = heap.top();
      heap.pop();
      now = ev.time;
      const policy::StepBatch* b = host->InFlight(ev.batch);
      auto mit = multi.find(ev.batch);
      if (b == nullptr) {  // lost with its instance
        if (mit != multi.end()) multi.erase(mit);
        continue;
      }
      if (mit != multi.end()) {
        MultiStep& m = mit->second;
        if (m.done == 0 && fo.step_failure_probability > 0 &&
            Uniform(fseed, kStepFailure, static_cast<uint64_t>(ev.batch)) < fo.step_failure_probability) {
          multi.erase(mit);
          ++result.failed_batches;
          RETURN_IF_ERROR(host->BatchFailed(ev.batch, now));
          RETURN_IF_ERROR(absorb(now));
          continue;
        }
        commands.clear();
        for (const auto& c : b->commands) {
          const policy::RequestState* r = host->scheduler().Find(c.id);
          if (r == nullptr || (m.done > 0 && !m.next_tokens.count(c.id))) continue;  // cancelled, or finished
          commands.push_back({c.id, c.threshold});
        }
        outcomes = commands.empty() ? std::vector<policy::StepOutcome>{} : denoiser.Step(commands);
        if (outcomes.size() != commands.size()) return Internal("denoiser returned a wrong number of outcomes");
        ++result.steps;
        result.request_steps += static_cast<int64_t>(commands.size());
        ++m.done;
        m.next_tokens.clear();
        double tokens = 0;
        for (const policy::StepOutcome& o : outcomes) {
          m.outcomes.push_back(o);
          if (o.request_done) continue;
          const int t = host->scheduler().Find(o.id)->TokensAfter(o);
          m.next_tokens[o.id] = t;
          tokens += t;
        }
        if (m.done < b->steps && tokens > 0) {
          heap.push({now + step_time(b->instance, tokens, now, ev.batch, m.done), seq++, ev.batch});
          continue;
        }
        std::vector<policy::StepOutcome> all = std::move(m.outcomes);
        multi.erase(mit);
        RETURN_IF_ERROR(host->BatchDone(ev.batch, all, now));
        RETURN_IF_ERROR(absorb(now));
        continue;
      }
      if (fo.step_failure_probability > 0 &&
          Uniform(fseed, kStepFailure, static_cast<uint64_t>(ev.batch)) < fo.step_failure_probability) {
        ++result.failed_batches;
        RETURN_IF_ERROR(host->BatchFailed(ev.batch, now));
      } else {
        // The step's effect is computed when it completes, so a lost step never happened.
        commands.clear();
        for (const auto& c : b->commands) {
          if (host->scheduler().Find(c.id) != nullptr) commands.push_back({c.id, c.threshold});  // not cancelled
        }
        outcomes = commands.empty() ? std::vector<policy::StepOutcome>{} : denoiser.Step(commands);
        if (outcomes.size() != commands.size()) return Internal("denoiser returned a wrong number of outcomes");
        RETURN_IF_ERROR(host->BatchDone(ev.batch, outcomes, now));
      }
    } else if (t_arr <= t_fault) {
      const policy::RequestSpec& spec = requests[next_arrival++];
      now = spec.arrival;
      denoiser.Start(spec, options.policy.block_size, options.seed * 0x100000001B3ull + static_cast<uint64_t>(spec.id));
      RETURN_IF_ERROR(host->Submit(spec, now));
      if (reconf) {
        if (const policy::RequestState* r = host->scheduler().Find(spec.id); r != nullptr && r->spec.slo > 0)
          RETURN_IF_ERROR(reconf->Record(now, spec.prompt_len, spec.output_len, r->spec.slo));
      }
      if (fo.cancel_fraction > 0 && Uniform(fseed, kCancelWho, spec.id) < fo.cancel_fraction) {
        if (const policy::RequestState* r = host->scheduler().Find(spec.id)) {
          faults.push({FaultEvent::kCancel, now + Uniform(fseed, kCancelWhen, spec.id) * r->spec.slo, fault_seq++,
                       spec.id, 0});
        }
      }
    } else {
      const FaultEvent f = faults.top();
      faults.pop();
      now = f.time;
      const auto id = static_cast<policy::InstanceId>(f.target);
      switch (f.kind) {
        case FaultEvent::kFail: {
          Status s = host->RemoveInstance(id, now, true);
          if (s.code() == StatusCode::kNotFound) break;  // already down
          RETURN_IF_ERROR(s);
          ++result.instance_failures;
          faults.push({FaultEvent::kAdd, now + f.back_after, fault_seq++, id, 0});
          break;
        }
        case FaultEvent::kDrain: {
          Status s = host->DrainInstance(id, now);
          if (s.code() == StatusCode::kNotFound) break;
          RETURN_IF_ERROR(s);
          break;
        }
        case FaultEvent::kAdd: {
          Status s = host->AddInstance(info_of.at(id), now);
          if (s.code() == StatusCode::kAlreadyExists) break;  // came back another way
          RETURN_IF_ERROR(s);
          break;
        }
        case FaultEvent::kCancel:
          if (host->scheduler().Find(f.target) != nullptr) RETURN_IF_ERROR(host->Cancel(f.target, now));
          break;
        case FaultEvent::kPlan: {
          if (!exec_busy && pending_at >= pending.size()) {  // a plan still running is finished first
            std::vector<policy::InstanceInfo> now_live;
            for (const auto& [lid, i] : live) now_live.push_back(i);
            ASSIGN_OR_RETURN(pending, reconf->Decide(now, now_live));
            pending_at = 0;
            RETURN_IF_ERROR(advance(now));
          }
          if (now + options.reconfig.period_s <= horizon)
            faults.push({FaultEvent::kPlan, now + options.reconfig.period_s, fault_seq++, 0, 0});
          break;
        }
        case FaultEvent::kLaunch: {
          const policy::InstanceInfo& info = info_of.at(id);
          RETURN_IF_ERROR(host->AddInstance(info, now));
          live[id] = info;
          ++result.reconfig_launches;
          sample_layout(now);
          exec_busy = false;
          RETURN_IF_ERROR(advance(now));
          break;
        }
      }
    }
    RETURN_IF_ERROR(absorb(now));

    if (options.progress && (result.events & 0xFFFF) == 0) {
      const auto w = std::chrono::steady_clock::now();
      if (w - last_progress > std::chrono::seconds(2)) {
        last_progress = w;
        const double el = std::chrono::duration<double>(w - wall_start).count();
        std::fprintf(stderr, "  [sim] t=%.0fs of %.0fs, %zu/%zu done, %zu live, %.2fM events/s\n", now, horizon,
                     num_left, requests.size(), host->live(), result.events / el / 1e6);
      }
    }
  }
  result.unaccounted = static_cast<int64_t>(requests.size() - num_left);
  if (reconf) result.plans = reconf->records();
  result.scheduler_stats = host->scheduler().stats();
  result.predictor_fallbacks = host->predictor_fallbacks();
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace tediserve::sim
