// The Scheduler's events and bookkeeping. Dispatch is in dispatch.cc, threshold choice and
// load control in threshold_choice.cc.
#include "policy/scheduler.h"

#include <array>
#include <algorithm>
#include <cmath>
#include <map>

namespace tediserve::policy {

StatusOr<PolicyOptions> PolicyOptions::Named(const std::string& name) {
  struct Preset {
    const char* name;
    DispatchKind dispatch;
    ThresholdKind threshold;
  };
  static constexpr Preset kPresets[] = {
      {"tediserve", DispatchKind::kStepLevel, ThresholdKind::kPlannedRescue},
      {"tediserve-paper", DispatchKind::kStepLevel, ThresholdKind::kSloAwareWithCaps},
      {"fixed", DispatchKind::kStepLevel, ThresholdKind::kFixed},
      {"slo-aware", DispatchKind::kStepLevel, ThresholdKind::kSloAware},
      {"caps-only", DispatchKind::kStepLevel, ThresholdKind::kCapsOnly},
      {"infaas", DispatchKind::kLeastLoaded, ThresholdKind::kFixed},
      {"llumnix", DispatchKind::kLeastLoadedMigrate, ThresholdKind::kFixed},
      {"proteus", DispatchKind::kLeastLoaded, ThresholdKind::kProteus},
  };
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    PolicyOptions o;
    o.name = name;
    o.dispatch = p.dispatch;
    o.threshold = p.threshold;
    o.defer_late = p.threshold == ThresholdKind::kPlannedRescue;
    if (p.threshold == ThresholdKind::kPlannedRescue) {
      // The frontier policy's plan (docs/design.md 3.5); Proteus the baseline keeps its own
      // smoothing and constant headroom.
      o.proteus_change_z = 2;
      o.proteus_headroom_slo_ratio = 0.03;
      o.step_scale_weight = 0.05;
      o.plan_latency_z = 2;
      o.plan_latency_miss_target = 0.05;
    }
    return o;
  }
  std::string all;
  for (const auto& n : Names()) all += (all.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown policy \"" + name + "\" (expected one of: " + all + ")");
}

std::vector<std::string> PolicyOptions::Names() {
  return {"tediserve", "tediserve-paper", "fixed", "slo-aware", "caps-only", "infaas", "llumnix", "proteus"};
}

const char* EndKindName(EndKind k) {
  switch (k) {
    case EndKind::kCancelled: return "cancelled";
    case EndKind::kRejected: return "rejected";
    case EndKind::kAborted: return "aborted";
  }
  return "?";
}

namespace {

ProteusMix::Options ProteusOptionsOf(const PolicyOptions& o) {
  ProteusMix::Options p;
  p.thresholds = o.thresholds;
  p.tokens_per_step = o.tokens_per_step;
  p.accuracy = o.accuracy;
  p.period = o.proteus_period;
  p.headroom = o.proteus_headroom;
  p.smoothing = o.proteus_smoothing;
  p.change_z = o.proteus_change_z;
  p.window = o.proteus_window;
  p.headroom_slo_ratio = o.proteus_headroom_slo_ratio;
  p.block_size = o.block_size;
  p.cache = o.cache;
  p.seed = o.seed;
  p.reserve_priority = o.threshold == ThresholdKind::kPlannedRescue;
  p.most_correct = o.threshold == ThresholdKind::kPlannedRescue;
  p.most_correct_margin = o.value_margin;
  if (o.threshold == ThresholdKind::kPlannedRescue && o.plan_latency_z > 0)
    p.latency_fraction = 1 / (1 + o.plan_latency_z * std::max(0.0, o.steps_cv));
  p.latency_miss_target = o.plan_latency_miss_target;
  return p;
}

}  // namespace

Scheduler::Scheduler(PolicyOptions options, const LatencyProfile* profile, StepEstimator* estimator)
    : options_(std::move(options)), profile_(profile), estimator_(estimator),
      proteus_(ProteusOptionsOf(options_)) {}

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(PolicyOptions options,
                                                       const LatencyProfile* profile,
                                                       StepEstimator* estimator,
                                                       std::vector<InstanceInfo> instances) {
  const auto& th = options.thresholds;
  if (th.empty() || th.size() > kMaxThresholds) {
    return InvalidArgument("policy.thresholds: need 1 to " + std::to_string(kMaxThresholds) + " candidates");
  }
  for (size_t k = 0; k < th.size(); ++k) {
    if (!(th[k] > 0 && th[k] <= 1)) return InvalidArgument("policy.thresholds: each must be in (0, 1]");
    if (k > 0 && !(th[k] < th[k - 1])) return InvalidArgument("policy.thresholds: must be strictly descending");
  }
  if (!(options.fixed_threshold > 0 && options.fixed_threshold <= 1)) {
    return InvalidArgument("policy.fixed_threshold: must be in (0, 1]");
  }
  if (options.block_size <= 0) return InvalidArgument("block_size: must be > 0");
  if (options.token_budget <= 0) return InvalidArgument("cluster.token_budget: must be > 0");
  if (options.max_live_requests < 0) return InvalidArgument("policy.max_live_requests: must be >= 0");
  if (options.max_step_failures < 1) return InvalidArgument("policy.max_step_failures: must be >= 1");
  if (!(options.proteus_change_z >= 0)) return InvalidArgument("policy.proteus_change_z: must be >= 0");
  if (options.proteus_window < 1) return InvalidArgument("policy.proteus_window: must be >= 1");
  if (!(options.proteus_headroom_slo_ratio >= 0) || !std::isfinite(options.proteus_headroom_slo_ratio))
    return InvalidArgument("policy.proteus_headroom_slo_ratio: must be >= 0");
  if (!(options.value_margin >= 0)) return InvalidArgument("policy.value_margin: must be >= 0");
  if (!(options.plan_latency_z >= 0) || !std::isfinite(options.plan_latency_z))
    return InvalidArgument("policy.plan_latency_z: must be >= 0");
  if (!(options.plan_latency_miss_target >= 0 && options.plan_latency_miss_target <= 1))
    return InvalidArgument("policy.plan_latency_miss_target: must be in [0, 1]");
  if (!(options.step_scale_weight >= 0 && options.step_scale_weight <= 1))
    return InvalidArgument("policy.step_scale_weight: must be in [0, 1]");
  if (options.batch_steps < 1 || options.batch_steps > kMaxBatchSteps)
    return InvalidArgument("policy.batch_steps: must be in [1, " + std::to_string(kMaxBatchSteps) + "]");
  if (UsesProteusMix(options.threshold) &&
      (options.tokens_per_step.size() != th.size() || options.accuracy.size() != th.size())) {
    return InvalidArgument("proteus and tediserve need tokens_per_step and accuracy for every candidate threshold");
  }
  if (profile == nullptr || estimator == nullptr) return InvalidArgument("scheduler needs a profile and an estimator");
  std::unique_ptr<Scheduler> s(new Scheduler(std::move(options), profile, estimator));
  for (const InstanceInfo& info : instances) RETURN_IF_ERROR(s->AddInstance(info).WithContext("cluster"));
  s->newest_cap_ = s->options_.thresholds.front();
  return s;
}

Status Scheduler::AddInstance(const InstanceInfo& info) {
  if (!profile_->HasTp(info.tp)) {
    return InvalidArgument("TP degree " + std::to_string(info.tp) + " of instance " + std::to_string(info.id) +
                           " is not in the latency profile " + profile_->source());
  }
  if (instance_index_.count(info.id)) {
    return AlreadyExists("instance id " + std::to_string(info.id) + " is already in the cluster");
  }
  Instance inst;
  inst.info = info;
  inst.tokens_per_second = profile_->TokensPerSecond(info.tp, options_.token_budget);
  instance_index_[info.id] = instances_.size();
  instances_.push_back(std::move(inst));
  return Status::Ok();
}

Scheduler::Instance* Scheduler::FindInstance(InstanceId id) {
  auto it = instance_index_.find(id);
  return it == instance_index_.end() ? nullptr : &instances_[it->second];
}

size_t Scheduler::accepting_instances() const {
  size_t n = 0;
  for (const Instance& i : instances_) n += i.accepting;
  return n;
}

void Scheduler::MeasureStep(Instance& inst, Seconds now, int steps, Seconds profile_seconds) {
  if (now >= inst.batch_start) {
    period_batches_ += steps;
    period_step_seconds_ += now - inst.batch_start;
  }
  if (options_.step_scale_weight == 0 || !(profile_seconds > 0)) return;  // the profile as it is
  double ratio = (now - inst.batch_start) / profile_seconds;
  if (!std::isfinite(ratio)) return;
  // Rounding in a driver that adds the profile's time to a clock is not a measurement; a
  // stalled step (a worker paused, a machine swapping) counts at most 4x, or twice the scale
  // where that is more (a machine much slower than its profile is followed all the way).
  if (std::abs(ratio - 1) < 1e-9) ratio = 1;
  ratio = std::clamp(ratio, 0.25, std::max(4.0, 2 * inst.step_scale));
  inst.step_scale += options_.step_scale_weight * (ratio - inst.step_scale);
}

double Scheduler::CapacityTokensPerSecond(int tp) const {
  const int m = options_.capacity_concurrency;
  if (m <= 0 || arrivals_ == 0) return profile_->TokensPerSecond(tp, options_.token_budget);
  const double seq = seq_sum_ / arrivals_;
  if (!options_.cache) return profile_->TokensPerSecond(tp, m * seq);
  const double tps = options_.tokens_per_step.empty() ? 1.0 : options_.tokens_per_step.front();
  const double cache_steps = std::max(0.0, options_.block_size / tps - 1);
  const double tokens = m * (seq + cache_steps * options_.block_size);
  const double time = profile_->StepSeconds(tp, m * seq) +
                      cache_steps * profile_->StepSeconds(tp, static_cast<double>(m) * options_.block_size);
  return tokens / time;
}

double Scheduler::CapacityTokens(Seconds slo) const {
  std::map<int, double> tau_by_tp;
  double tau = 0;
  for (const Instance& i : instances_) {
    if (!i.accepting) continue;
    auto it = tau_by_tp.find(i.info.tp);
    if (it == tau_by_tp.end()) it = tau_by_tp.emplace(i.info.tp, CapacityTokensPerSecond(i.info.tp)).first;
    tau += it->second;
  }
  return slo * tau;
}

const RequestState* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

double Scheduler::MeanThreshold() const {
  if (requests_.empty()) return 0;
  double s = 0;
  for (const auto& [id, r] : requests_) s += r.threshold;
  return s / requests_.size();
}

double Scheduler::MeanCap() const {
  if (requests_.empty()) return 0;
  double s = 0;
  for (const auto& [id, r] : requests_) s += r.cap;
  return s / requests_.size();
}

Seconds Scheduler::NextWakeup() const {
  Seconds t = kNever;
  if (UsesProteusMix(options_.threshold)) t = proteus_.next_period();
  if (load_control_due_) t = std::min(t, last_load_control_ + options_.load_control_debounce);
  return t;
}

// ---- Predictions. ---------------------------------------------------------------------------

void Scheduler::RefreshBatch(std::span<RequestState* const> rs) {
  if (rs.empty()) return;
  if (options_.async_predictions) {
    for (RequestState* r : rs) {
      r->tokens_since_refresh = 0;
      if (r->prediction_pending) continue;  // one in flight per request
      r->prediction_pending = true;
      r->prediction_steps = r->steps;
      pending_predictions_.push_back(*r);
    }
    return;
  }
  const size_t n = options_.thresholds.size();
  batch_states_.assign(rs.begin(), rs.end());
  batch_out_.resize(rs.size() * n);
  estimator_->PredictBatch(batch_states_, options_.thresholds, batch_out_);
  for (size_t i = 0; i < rs.size(); ++i) {
    StorePrediction(*rs[i], std::span<const double>(batch_out_).subspan(i * n, n), 0);
    rs[i]->tokens_since_refresh = 0;
  }
}

void Scheduler::StorePrediction(RequestState& r, std::span<const double> predicted, int steps_since) {
  for (size_t k = 0; k < predicted.size(); ++k)
    r.predicted[k] = std::max<double>(predicted[k] - steps_since, r.MinRemainingSteps());
  r.needs_prediction = false;
  ++stats_.predictions;
}

std::vector<RequestState> Scheduler::TakePredictionRequests() {
  std::vector<RequestState> out;
  out.swap(pending_predictions_);
  return out;
}

Status Scheduler::OnPredictions(std::span<const RequestId> ids, std::span<const double> predicted, Seconds now,
                                Decisions* /*out*/) {
  const size_t n = options_.thresholds.size();
  if (predicted.size() != ids.size() * n) {
    return InvalidArgument("predictions: " + std::to_string(predicted.size()) + " values for " +
                           std::to_string(ids.size()) + " requests x " + std::to_string(n) + " thresholds");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = requests_.find(ids[i]);
    if (it == requests_.end()) continue;  // it left while its prediction ran
    RequestState& r = it->second;
    StorePrediction(r, predicted.subspan(i * n, n), r.steps - r.prediction_steps);
    r.prediction_pending = false;
    // A fresh prediction re-runs Algorithm 1 for the request's next step (docs/design.md
    // section 3.1).
    if (!r.in_flight) ChooseThreshold(r, now);
  }
  MaybeLoadControl(now);
  return Status::Ok();
}

void Scheduler::Refresh(RequestState& r) {
  const size_t n = options_.thresholds.size();
  std::array<double, kMaxThresholds> p{};
  estimator_->Predict(r, options_.thresholds, std::span<double>(p.data(), n));
  StorePrediction(r, std::span<const double>(p.data(), n), 0);
  r.tokens_since_refresh = 0;
}

// ---- Placement bookkeeping. -----------------------------------------------------------------

void Scheduler::SetQueuedTokens(RequestState& r, int tokens) {
  if (r.instance >= 0) {
    Instance& inst = instances_[instance_index_.at(r.instance)];
    inst.next_tokens += tokens - r.queued_tokens;
  }
  r.queued_tokens = tokens;
}

void Scheduler::Place(RequestState& r, Instance& inst) {
  if (r.instance == inst.info.id) return;
  const bool moved = r.instance >= 0;
  Unplace(r);
  if (moved) {
    ++r.migrations;
    ++stats_.migrations;
  }
  r.instance = inst.info.id;
  inst.residents.push_back(r.spec.id);
  r.queued_tokens = r.NextStepTokens();
  inst.next_tokens += r.queued_tokens;
  inst.load_tokens += r.spec.prompt_len + r.spec.output_len;
  waiting_.erase(WaitKeyOf(r));
}

void Scheduler::Unplace(RequestState& r) {
  if (r.instance < 0) return;
  Instance& inst = instances_[instance_index_.at(r.instance)];
  auto it = std::find(inst.residents.begin(), inst.residents.end(), r.spec.id);
  if (it != inst.residents.end()) inst.residents.erase(it);
  inst.next_tokens -= r.queued_tokens;
  inst.load_tokens -= r.spec.prompt_len + r.spec.output_len;
  r.queued_tokens = 0;
  r.instance = -1;
}

void Scheduler::ReturnToWaiting(RequestState& r) {
  Unplace(r);
  waiting_.insert(WaitKeyOf(r));
}

bool Scheduler::CheckLate(RequestState& r, Seconds now) {
  if (!options_.defer_late || r.late || now < r.deadline) return r.late;
  const bool waiting = r.instance < 0 && waiting_.erase(WaitKeyOf(r)) > 0;
  r.late = true;
  if (waiting) waiting_.insert(WaitKeyOf(r));
  return true;
}

void Scheduler::Forget(RequestState& r) {
  const RequestId id = r.spec.id;
  Unplace(r);
  order_.erase(KeyOf(r));
  waiting_.erase(WaitKeyOf(r));
  requests_.erase(id);
}

void Scheduler::LoseBatch(Instance& inst, const std::string& why, Decisions* out) {
  for (RequestId id : inst.batch_ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // cancelled while in flight
    RequestState& r = it->second;
    r.in_flight = false;
    r.batch = 0;
    r.kv_valid = false;
    ++r.failures;
    ++stats_.lost_steps;
    if (r.failures >= options_.max_step_failures) {
      out->ended.push_back(EndOf(r, EndKind::kAborted, StatusCode::kUnavailable,
                                 "its step was lost " + std::to_string(r.failures) + " times (last: " + why + ")"));
      Forget(r);
      continue;
    }
    SetQueuedTokens(r, r.NextStepTokens());
  }
  batches_.erase(inst.batch);
  inst.batch = 0;
  inst.batch_ids.clear();
  inst.busy = false;
}

void Scheduler::ReportDrained(Decisions* out) {
  for (Instance& inst : instances_) {
    if (inst.accepting || inst.drained_reported || inst.busy || !inst.residents.empty()) continue;
    inst.drained_reported = true;
    out->drained.push_back(inst.info.id);
  }
}

// ---- Events. --------------------------------------------------------------------------------

Status Scheduler::OnArrival(const RequestSpec& spec, Seconds now, Decisions* out) {
  const std::string who = "request " + std::to_string(spec.id);
  if (requests_.count(spec.id)) return AlreadyExists(who + ": the id is already live");
  if (spec.prompt_len <= 0 || spec.output_len <= 0) {
    return InvalidArgument(who + ": prompt and output lengths must be > 0 (got " + std::to_string(spec.prompt_len) +
                           ", " + std::to_string(spec.output_len) + ")");
  }
  if (!(spec.slo > 0) || !std::isfinite(spec.slo)) return InvalidArgument(who + ": slo must be > 0 seconds");
  if (!std::isfinite(spec.arrival)) return InvalidArgument(who + ": arrival time is not finite");
  if (options_.cache && spec.output_len % options_.block_size != 0) {
    return InvalidArgument(who + ": output length " + std::to_string(spec.output_len) +
                           " is not a multiple of the block size " + std::to_string(options_.block_size));
  }
  if (options_.max_live_requests > 0 && requests_.size() >= static_cast<size_t>(options_.max_live_requests)) {
    EndedRequest e;
    e.id = spec.id;
    e.kind = EndKind::kRejected;
    e.code = StatusCode::kResourceExhausted;
    e.reason = "the server holds its limit of " + std::to_string(options_.max_live_requests) + " live requests";
    out->ended.push_back(std::move(e));
    return Status::Ok();
  }
  RequestSpec clean = spec;
  // Per-request bounds from outside are sanitised here so every later clamp is well-defined.
  clean.min_threshold = std::clamp(std::isnan(spec.min_threshold) ? 0.0 : spec.min_threshold, 0.0, 1.0);
  clean.max_threshold = std::clamp(std::isnan(spec.max_threshold) ? 1.0 : spec.max_threshold, clean.min_threshold, 1.0);
  RequestState& rs = requests_.emplace(spec.id, MakeRequestState(clean, options_.block_size, options_.cache,
                                                                 options_.thresholds.front()))
                         .first->second;
  // Until the next load-control pass, a newcomer gets the cap of the newest request of the
  // last pass: Algorithm 2 lowers the newest first, so that is the cap it would likely get.
  rs.cap = newest_cap_;
  seq_sum_ += spec.prompt_len + spec.output_len;
  ++arrivals_;
  Refresh(rs);
  const OrderKey key = KeyOf(rs);
  order_.insert(key);

  if (UsesProteusMix(options_.threshold)) {
    AdvanceProteus(now);
    const double drawn = proteus_.OnArrival(rs.spec, rs.num_blocks, rs.spec.min_threshold, rs.spec.max_threshold);
    if (options_.threshold == ThresholdKind::kProteus) {
      rs.threshold = drawn;
    } else {
      rs.cap = drawn;  // the plan: Algorithm 1 may go lower, never higher
    }
  }
  MaybeLoadControl(now);
  if (options_.dispatch == DispatchKind::kStepLevel) {
    waiting_.insert(WaitKeyOf(rs));
    DispatchWaiting(now);
  } else if (Instance* dst = LeastLoaded()) {
    Place(rs, *dst);
    ChooseThreshold(rs, now);
  } else {
    waiting_.insert(WaitKeyOf(rs));  // no instance takes work now; placed when one does
  }
  LaunchIdle(now, out);
  return Status::Ok();
}

Status Scheduler::OnBatchDone(BatchId batch, std::span<const StepOutcome> outcomes, Seconds now, Decisions* out) {
  auto bit = batches_.find(batch);
  if (bit == batches_.end()) {
    if (batch > 0 && batch < next_batch_) {
      return FailedPrecondition("step batch " + std::to_string(batch) +
                                " is not in flight (it already came back, failed, or was lost with its instance)");
    }
    return InvalidArgument("step batch " + std::to_string(batch) + " was never launched");
  }
  Instance& inst = instances_[instance_index_.at(bit->second)];
  // The result names requests of the batch, each for at most the batch's steps and never
  // after it finished, and covers every one still live.
  size_t live_in_batch = 0;
  for (RequestId id : inst.batch_ids) live_in_batch += requests_.count(id);
  size_t matched = 0;
  int steps_run = 0;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const StepOutcome& o = outcomes[i];
    const std::string who = "step batch " + std::to_string(batch) + ": request " + std::to_string(o.id);
    if (std::find(inst.batch_ids.begin(), inst.batch_ids.end(), o.id) == inst.batch_ids.end()) {
      return InvalidArgument(who + " is not in the batch");
    }
    int earlier = 0;
    for (size_t j = 0; j < i; ++j) {
      if (outcomes[j].id != o.id) continue;
      if (outcomes[j].request_done) return InvalidArgument(who + " is reported after it finished");
      ++earlier;
    }
    if (earlier >= inst.batch_steps) {
      return InvalidArgument(who + (inst.batch_steps == 1 ? " is reported twice"
                                                          : " is reported for more than the batch's " +
                                                                std::to_string(inst.batch_steps) + " steps"));
    }
    if (o.unmasked < 0) return InvalidArgument(who + " unmasked a negative number of tokens");
    if (earlier == 0) matched += requests_.count(o.id);
    steps_run = std::max(steps_run, earlier + 1);
  }
  if (matched != live_in_batch) {
    return InvalidArgument("step batch " + std::to_string(batch) + ": the result covers " + std::to_string(matched) +
                           " of its " + std::to_string(live_in_batch) + " live requests");
  }

  const InstanceId instance = inst.info.id;
  last_done_ = Ran(batch, outcomes);
  batches_.erase(bit);
  inst.batch = 0;
  inst.batch_ids.clear();
  inst.busy = false;
  inst.busy_until = now;  // the truth replaces the prediction
  MeasureStep(inst, now, std::max(1, steps_run), last_done_.profile_seconds);
  std::vector<RequestId>& ready = ready_scratch_;
  ready.clear();
  std::vector<RequestState*>& to_refresh = refresh_scratch_;  // one batched prediction for the step
  to_refresh.clear();
  const int k_refresh = estimator_->refresh_tokens();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const StepOutcome& o = outcomes[i];
    auto it = requests_.find(o.id);
    if (it == requests_.end()) continue;  // cancelled while in flight (or finished by an earlier step)
    RequestState& r = it->second;
    r.in_flight = false;
    r.batch = 0;
    if (r.Apply(o)) {
      ++period_finished_;
      period_late_ += now > r.deadline;
      out->finished.push_back({r.spec, now, r.steps, r.migrations, r.failures});
      Forget(r);
      continue;
    }
    // Between refreshes a step counts one step off every prediction.
    for (size_t k = 0; k < options_.thresholds.size(); ++k) {
      r.predicted[k] = std::max<double>(r.predicted[k] - 1, r.MinRemainingSteps());
    }
    r.tokens_since_refresh += o.unmasked;
    // The rest once per request, after its last step in the batch.
    bool last = true;
    for (size_t j = i + 1; j < outcomes.size() && last && steps_run > 1; ++j) last = outcomes[j].id != o.id;
    if (!last) continue;
    if ((k_refresh > 0 && r.tokens_since_refresh >= k_refresh) || (k_refresh <= 0 && o.block_done)) {
      to_refresh.push_back(&r);
    }
    SetQueuedTokens(r, r.NextStepTokens());
    ready.push_back(o.id);
  }
  RefreshBatch(to_refresh);
  MaybeLoadControl(now);
  DispatchReady(ready, instance, now);
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

Status Scheduler::OnBatchFailed(BatchId batch, Seconds now, Decisions* out) {
  auto bit = batches_.find(batch);
  if (bit == batches_.end()) {
    return (batch > 0 && batch < next_batch_)
               ? FailedPrecondition("step batch " + std::to_string(batch) + " is not in flight")
               : InvalidArgument("step batch " + std::to_string(batch) + " was never launched");
  }
  Instance& inst = instances_[instance_index_.at(bit->second)];
  const InstanceId instance = inst.info.id;
  std::vector<RequestId> ready;
  for (RequestId id : inst.batch_ids) {
    if (requests_.count(id)) ready.push_back(id);
  }
  LoseBatch(inst, "step batch " + std::to_string(batch) + " failed on instance " + std::to_string(instance), out);
  inst.busy_until = now;
  // The survivors stay resident; their next step recomputes, so they may move.
  std::erase_if(ready, [&](RequestId id) { return requests_.count(id) == 0; });
  DispatchReady(ready, instance, now);
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

Status Scheduler::OnInstanceAdded(const InstanceInfo& info, Seconds now, Decisions* out) {
  RETURN_IF_ERROR(AddInstance(info));
  DispatchWaiting(now);
  LaunchIdle(now, out);
  return Status::Ok();
}

Status Scheduler::OnInstanceDraining(InstanceId id, Seconds now, Decisions* out) {
  Instance* inst = FindInstance(id);
  if (inst == nullptr) return NotFound("instance " + std::to_string(id) + " is not in the cluster");
  if (!inst->accepting) return Status::Ok();  // already draining
  inst->accepting = false;
  // Residents at a block boundary leave now; the others after their block.
  std::vector<RequestId> leave;
  for (RequestId rid : inst->residents) {
    const RequestState& r = requests_.at(rid);
    if (!r.in_flight && r.NextIsRecompute()) leave.push_back(rid);
  }
  for (RequestId rid : leave) ReturnToWaiting(requests_.at(rid));
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

Status Scheduler::OnInstanceRemoved(InstanceId id, Seconds now, Decisions* out) {
  Instance* inst = FindInstance(id);
  if (inst == nullptr) return NotFound("instance " + std::to_string(id) + " is not in the cluster");
  if (inst->busy) LoseBatch(*inst, "instance " + std::to_string(id) + " went away", out);
  // Its KV caches are gone with it: every resident recomputes wherever it runs next.
  const std::vector<RequestId> residents = inst->residents;
  for (RequestId rid : residents) {
    RequestState& r = requests_.at(rid);
    r.kv_valid = false;
    ReturnToWaiting(r);
  }
  const size_t index = instance_index_.at(id);
  instances_.erase(instances_.begin() + static_cast<std::ptrdiff_t>(index));
  instance_index_.erase(id);
  for (size_t i = index; i < instances_.size(); ++i) instance_index_[instances_[i].info.id] = i;
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

Status Scheduler::OnCancel(RequestId id, Seconds now, Decisions* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return NotFound("request " + std::to_string(id) + " is not live (it finished, ended or never arrived)");
  }
  out->ended.push_back(EndOf(it->second, EndKind::kCancelled, StatusCode::kCancelled, "cancelled by the client"));
  Forget(it->second);
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

Status Scheduler::OnAbort(RequestId id, const std::string& reason, Seconds now, Decisions* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return NotFound("request " + std::to_string(id) + " is not live (it finished, ended or never arrived)");
  }
  out->ended.push_back(EndOf(it->second, EndKind::kAborted, StatusCode::kUnavailable, reason));
  Forget(it->second);
  DispatchWaiting(now);
  LaunchIdle(now, out);
  ReportDrained(out);
  return Status::Ok();
}

double Scheduler::StepScale(InstanceId id) const {
  auto it = instance_index_.find(id);
  return it == instance_index_.end() ? 1.0 : instances_[it->second].step_scale;
}

BatchId Scheduler::InFlightBatch(InstanceId id) const {
  auto it = instance_index_.find(id);
  return it == instance_index_.end() ? 0 : instances_[it->second].batch;
}

Scheduler::RanWork Scheduler::Ran(BatchId batch, std::span<const StepOutcome> outcomes) const {
  RanWork w;
  auto bit = batches_.find(batch);
  if (bit == batches_.end()) return w;
  const Instance& inst = instances_[instance_index_.at(bit->second)];
  if (inst.batch_steps == 1) return {1, inst.batch_tokens, inst.batch_profile_seconds};
  // Tokens of each step: a request pushes its next step's tokens at the first, then after
  // each of its outcomes the block (cache step) or, where a block ended, the sequence.
  std::array<int64_t, kMaxBatchSteps> tokens{};
  std::unordered_map<RequestId, std::pair<int, int>> next;  // id -> (its step index, tokens)
  for (const StepOutcome& o : outcomes) {
    auto it = next.find(o.id);
    if (it == next.end()) {
      const RequestState* r = Find(o.id);
      if (r == nullptr) continue;
      it = next.emplace(o.id, std::pair<int, int>{0, r->NextStepTokens()}).first;
    }
    auto& [k, t] = it->second;
    if (k >= kMaxBatchSteps) continue;
    tokens[static_cast<size_t>(k++)] += t;
    t = requests_.at(o.id).TokensAfter(o);
  }
  for (int64_t t : tokens) {
    if (t == 0) continue;
    ++w.steps;
    w.tokens += t;
    w.profile_seconds += profile_->StepSeconds(inst.info.tp, static_cast<double>(t));
  }
  return w;
}

std::vector<RequestId> Scheduler::LiveIds() const {
  std::vector<RequestId> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status Scheduler::OnTick(Seconds now, Decisions* out) {
  if (UsesProteusMix(options_.threshold)) AdvanceProteus(now);
  MaybeLoadControl(now);
  DispatchWaiting(now);
  LaunchIdle(now, out);
  return Status::Ok();
}

}  // namespace tediserve::policy
