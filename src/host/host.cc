#include "host/host.h"

#include <algorithm>
#include <cmath>

namespace tediserve::host {

Seconds SoloLatency(const policy::RequestSpec& r, const policy::LatencyProfile& profile, int tp, int block,
                    bool cache, double tokens_per_step) {
  const double seq = r.prompt_len + r.output_len;
  const double steps = std::max<double>(std::ceil(static_cast<double>(r.output_len) / block),
                                        r.output_len / tokens_per_step);
  if (!cache) return steps * profile.StepSeconds(tp, seq);
  const double blocks = std::ceil(static_cast<double>(r.output_len) / block);
  return blocks * profile.StepSeconds(tp, seq) + std::max(0.0, steps - blocks) * profile.StepSeconds(tp, block);
}

StatusOr<std::unique_ptr<Host>> Host::Create(HostOptions options, const policy::LatencyProfile* profile,
                                             policy::OracleEstimator::Truth truth) {
  if (profile == nullptr) return InvalidArgument("host: no latency profile");
  if (options.slo_seconds < 0 || options.slo_scale < 0 || !std::isfinite(options.slo_seconds) ||
      !std::isfinite(options.slo_scale)) {
    return InvalidArgument("slo: seconds and scale must be >= 0");
  }
  if (!(options.prediction_delay >= 0) || !std::isfinite(options.prediction_delay)) {
    return InvalidArgument("policy.predictor_latency_s: must be >= 0");
  }
  options.estimator.thresholds = options.policy.thresholds;
  std::unique_ptr<Host> h(new Host(std::move(options), profile));
  ASSIGN_OR_RETURN(h->estimators_, Estimators::Create(h->options_.estimator, std::move(truth)));
  if (h->options_.on_prediction_ready && h->estimators_->worker() != nullptr) {
    h->estimators_->worker()->SetOnDone([cb = h->options_.on_prediction_ready](uint64_t) { cb(); });
  }
  policy::PolicyOptions po = h->options_.policy;
  po.async_predictions = h->estimators_->worker() != nullptr;
  ASSIGN_OR_RETURN(h->scheduler_, policy::Scheduler::Create(po, profile, h->estimators_->estimator(),
                                                            h->options_.instances));
  h->accounting_ = std::make_unique<Accounting>(h->options_.accuracy, h->options_.measured);
  h->solo_tp_ = 0;
  for (const auto& i : h->options_.instances) h->solo_tp_ = h->solo_tp_ ? std::min(h->solo_tp_, i.tp) : i.tp;
  if (h->solo_tp_ == 0) {
    const std::vector<int> tps = profile->TpDegrees();
    h->solo_tp_ = tps.empty() ? 1 : tps.front();
  }
  return h;
}

Host::~Host() = default;

Outcome Host::OutcomeOf(policy::EndKind k) const {
  switch (k) {
    case policy::EndKind::kCancelled: return Outcome::kCancelled;
    case policy::EndKind::kRejected: return Outcome::kRejected;
    case policy::EndKind::kAborted: return Outcome::kAborted;
  }
  return Outcome::kAborted;
}

void Host::Absorb(Seconds now) {
  for (policy::StepBatch& b : decisions_.batches) {
    in_flight_.emplace(b.id, b);
    output_.batches.push_back(std::move(b));
  }
  for (const policy::FinishedRequest& f : decisions_.finished) {
    output_.left.push_back(accounting_->OnLeave(f.spec.id, f.finish, Outcome::kCompleted, f.steps, f.migrations,
                                                f.failures, ""));
  }
  for (policy::EndedRequest& e : decisions_.ended) {
    const Outcome o = aborts_are_failures_ && e.kind == policy::EndKind::kAborted ? Outcome::kFailed : OutcomeOf(e.kind);
    output_.left.push_back(accounting_->OnLeave(e.id, now, o, e.steps, e.migrations, e.failures, std::move(e.reason)));
  }
  output_.drained.insert(output_.drained.end(), decisions_.drained.begin(), decisions_.drained.end());
  decisions_.clear();
  if (predictor::PredictionWorker* w = estimators_->worker()) {
    std::vector<policy::RequestState> due = scheduler_->TakePredictionRequests();
    if (!due.empty()) predictions_.push_back({now + options_.prediction_delay, w->Submit(std::move(due))});
  }
}

Status Host::Submit(policy::RequestSpec spec, Seconds now) {
  const std::string who = "request " + std::to_string(spec.id);
  if (accounting_->knows(spec.id)) return AlreadyExists(who + ": the id is already live");
  if (spec.prompt_len <= 0 || spec.output_len <= 0) {
    return InvalidArgument(who + ": prompt and output lengths must be > 0");
  }
  if (std::isnan(spec.min_threshold) || std::isnan(spec.max_threshold) || spec.min_threshold > spec.max_threshold) {
    return InvalidArgument(who + ": min_threshold must be <= max_threshold");
  }
  if (!(spec.slo_factor > 0) || !std::isfinite(spec.slo_factor)) {
    return InvalidArgument(who + ": slo_factor must be a finite number > 0");
  }
  if (!(spec.slo > 0)) {
    if (options_.slo_seconds > 0) {
      spec.slo = options_.slo_seconds;
    } else if (options_.slo_scale > 0 && !options_.estimator.tokens_per_step.empty()) {
      spec.slo = options_.slo_scale * SoloLatency(spec, *profile_, solo_tp_, options_.policy.block_size,
                                                  options_.policy.cache, options_.estimator.tokens_per_step.front());
    } else {
      return InvalidArgument(who + ": no SLO given and no default SLO configured");
    }
    spec.slo *= spec.slo_factor;
  }
  RETURN_IF_ERROR(scheduler_->OnArrival(spec, now, &decisions_));
  accounting_->OnArrival(spec);
  Absorb(now);
  return Status::Ok();
}

Status Host::BatchDone(BatchId batch, std::span<const policy::StepOutcome> outcomes, Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnBatchDone(batch, outcomes, now, &decisions_));
  // The core accepted the result, so the batch is in the table. Account the step before the
  // core's decisions turn finished requests into records.
  auto it = in_flight_.find(batch);
  if (it != in_flight_.end()) {
    const std::vector<policy::StepCommand>& commands = it->second.commands;
    for (size_t k = 0; k < outcomes.size(); ++k) {
      const policy::StepOutcome& o = outcomes[k];
      size_t j = k < commands.size() && commands[k].id == o.id ? k : 0;
      while (j < commands.size() && commands[j].id != o.id) ++j;
      if (j < commands.size()) accounting_->OnStep(o.id, o.unmasked, commands[j].threshold);
    }
    in_flight_.erase(it);
  }
  Absorb(now);
  return Status::Ok();
}

Status Host::BatchFailed(BatchId batch, Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnBatchFailed(batch, now, &decisions_));
  in_flight_.erase(batch);
  Absorb(now);
  return Status::Ok();
}

Status Host::AddInstance(const policy::InstanceInfo& info, Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnInstanceAdded(info, now, &decisions_));
  solo_tp_ = std::min(solo_tp_, info.tp);
  Absorb(now);
  return Status::Ok();
}

Status Host::DrainInstance(InstanceId id, Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnInstanceDraining(id, now, &decisions_));
  Absorb(now);
  return Status::Ok();
}

Status Host::RemoveInstance(InstanceId id, Seconds now, bool failed) {
  RETURN_IF_ERROR(scheduler_->OnInstanceRemoved(id, now, &decisions_));
  // Its batch (at most one) is lost: forget it here too.
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    it = it->second.instance == id ? in_flight_.erase(it) : std::next(it);
  }
  instance_failures_ += failed;
  Absorb(now);
  return Status::Ok();
}

Status Host::Cancel(RequestId id, Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnCancel(id, now, &decisions_));
  Absorb(now);
  return Status::Ok();
}

Status Host::Tick(Seconds now) {
  RETURN_IF_ERROR(scheduler_->OnTick(now, &decisions_));
  Absorb(now);
  return Status::Ok();
}

Status Host::FailAll(Seconds now, const std::string& reason) {
  for (RequestId id : scheduler_->LiveIds()) RETURN_IF_ERROR(scheduler_->OnAbort(id, reason, now, &decisions_));
  aborts_are_failures_ = true;
  Absorb(now);
  aborts_are_failures_ = false;
  return Status::Ok();
}

Seconds Host::NextPredictionDue() const { return predictions_.empty() ? policy::kNever : predictions_.front().due; }

StatusOr<bool> Host::DeliverNextPrediction(Seconds now, bool wait) {
  predictor::PredictionWorker* w = estimators_->worker();
  if (predictions_.empty() || w == nullptr) return false;
  predictor::PredictionWorker::Result r;
  if (wait) {
    r = w->Wait(predictions_.front().ticket);
  } else if (!w->TryTake(predictions_.front().ticket, &r)) {
    return false;
  }
  predictions_.pop_front();
  RETURN_IF_ERROR(scheduler_->OnPredictions(r.ids, r.predicted, now, &decisions_));
  Absorb(now);
  return true;
}

Seconds Host::NextWakeup() const { return std::min(scheduler_->NextWakeup(), NextPredictionDue()); }

TimelinePoint Host::SampleTimeline(Seconds now, Seconds interval) {
  return accounting_->Sample(now, interval, static_cast<int>(scheduler_->live()),
                             static_cast<int>(scheduler_->waiting()), scheduler_->MeanThreshold(),
                             scheduler_->MeanCap());
}

const policy::StepBatch* Host::InFlight(BatchId batch) const {
  auto it = in_flight_.find(batch);
  return it == in_flight_.end() ? nullptr : &it->second;
}

}  // namespace tediserve::host
