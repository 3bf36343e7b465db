#include "policy/scheduler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "policy/threshold_controller.h"

namespace tediserve::policy {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

StatusOr<PolicyOptions> PolicyOptions::Named(const std::string& name) {
  PolicyOptions o;
  o.name = name;
  if (name == "tediserve") {
    o.dispatch = DispatchKind::kStepLevel;
    o.threshold = ThresholdKind::kSloAwareWithCaps;
  } else if (name == "fixed") {
    o.dispatch = DispatchKind::kStepLevel;
    o.threshold = ThresholdKind::kFixed;
  } else if (name == "slo-aware") {
    o.dispatch = DispatchKind::kStepLevel;
    o.threshold = ThresholdKind::kSloAware;
  } else if (name == "caps-only") {
    o.dispatch = DispatchKind::kStepLevel;
    o.threshold = ThresholdKind::kCapsOnly;
  } else if (name == "infaas") {
    o.dispatch = DispatchKind::kLeastLoaded;
    o.threshold = ThresholdKind::kFixed;
  } else if (name == "llumnix") {
    o.dispatch = DispatchKind::kLeastLoadedMigrate;
    o.threshold = ThresholdKind::kFixed;
  } else if (name == "proteus") {
    o.dispatch = DispatchKind::kLeastLoaded;
    o.threshold = ThresholdKind::kProteus;
  } else {
    std::string all;
    for (const auto& n : Names()) all += (all.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown policy \"" + name + "\" (expected one of: " + all + ")");
  }
  return o;
}

std::vector<std::string> PolicyOptions::Names() {
  return {"tediserve", "fixed", "slo-aware", "caps-only", "infaas", "llumnix", "proteus"};
}

Scheduler::Scheduler(PolicyOptions options, const LatencyProfile* profile, StepEstimator* estimator)
    : options_(std::move(options)), profile_(profile), estimator_(estimator),
      rng_state_(options_.seed ^ 0x5DEECE66Dull) {}

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
  if (options.threshold == ThresholdKind::kProteus &&
      (options.tokens_per_step.size() != th.size() || options.accuracy.size() != th.size())) {
    return InvalidArgument("proteus needs tokens_per_step and accuracy for every candidate threshold");
  }
  if (profile == nullptr || estimator == nullptr) return InvalidArgument("scheduler needs a profile and an estimator");
  if (instances.empty()) return InvalidArgument("cluster: no instances");
  std::unique_ptr<Scheduler> s(new Scheduler(std::move(options), profile, estimator));
  for (const InstanceInfo& info : instances) {
    if (!profile->HasTp(info.tp)) {
      return InvalidArgument("cluster: TP degree " + std::to_string(info.tp) +
                             " is not in the latency profile " + profile->source());
    }
    if (s->instance_index_.count(info.id)) {
      return InvalidArgument("cluster: instance id " + std::to_string(info.id) + " appears twice");
    }
    Instance inst;
    inst.info = info;
    inst.tokens_per_second = profile->TokensPerSecond(info.tp, s->options_.token_budget);
    s->instance_index_[info.id] = s->instances_.size();
    s->instances_.push_back(std::move(inst));
  }
  s->proteus_mix_.assign(s->options_.thresholds.size(), 0.0);
  s->proteus_mix_[0] = 1.0;
  s->proteus_next_period_ = s->options_.proteus_period;
  s->newest_cap_ = s->options_.thresholds.front();
  return s;
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

void Scheduler::OnPredictions(std::span<const RequestId> ids, std::span<const double> predicted, Seconds now) {
  const size_t n = options_.thresholds.size();
  if (predicted.size() != ids.size() * n) return;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = requests_.find(ids[i]);
    if (it == requests_.end()) continue;
    RequestState& r = it->second;
    StorePrediction(r, predicted.subspan(i * n, n), r.steps - r.prediction_steps);
    r.prediction_pending = false;
    // A fresh prediction re-runs Algorithm 1 for the request's next step (DESIGN.md 3.1).
    if (!r.in_flight) ChooseThreshold(r, now);
  }
  MaybeLoadControl(now);
}

void Scheduler::Refresh(RequestState& r) {
  const size_t n = options_.thresholds.size();
  std::array<double, kMaxThresholds> p{};
  estimator_->Predict(r, options_.thresholds, std::span<double>(p.data(), n));
  StorePrediction(r, std::span<const double>(p.data(), n), 0);
  r.tokens_since_refresh = 0;
}

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
  waiting_.erase({-r.spec.priority, r.spec.arrival, r.spec.id});
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

// Algorithm 3's choice: among instances whose next batch still fits the token budget with r,
// the one with the earliest completion of r's next step.
Scheduler::Instance* Scheduler::BestStepLevel(const RequestState& r, Seconds now, Seconds* best_time) {
  Instance* best = nullptr;
  *best_time = 1e300;
  const int tokens = r.NextStepTokens();
  for (Instance& inst : instances_) {
    const int64_t batch = inst.next_tokens - (r.instance == inst.info.id ? r.queued_tokens : 0) + tokens;
    // An empty instance takes any request (a sequence longer than the budget still runs).
    if (batch > options_.token_budget && batch != tokens) continue;
    const Seconds t = std::max(0.0, inst.busy_until - now) + profile_->StepSeconds(inst.info.tp, batch);
    if (t < *best_time) {
      *best_time = t;
      best = &inst;
    }
  }
  ++stats_.dispatch_decisions;
  return best;
}

Scheduler::Instance* Scheduler::LeastLoaded() {
  Instance* best = nullptr;
  double best_load = 1e300;
  for (Instance& inst : instances_) {
    const double load = inst.load_tokens / inst.tokens_per_second;
    if (load < best_load) {
      best_load = load;
      best = &inst;
    }
  }
  ++stats_.dispatch_decisions;
  return best;
}

void Scheduler::ChooseThreshold(RequestState& r, Seconds now) {
  const auto& th = options_.thresholds;
  switch (options_.threshold) {
    case ThresholdKind::kFixed: {
      r.threshold = std::clamp(options_.fixed_threshold, r.spec.min_threshold, r.spec.max_threshold);
      return;
    }
    case ThresholdKind::kProteus:
      return;  // drawn at arrival, kept
    case ThresholdKind::kCapsOnly: {
      r.threshold = th[AllowedRange(r, th, r.cap).first];
      return;
    }
    case ThresholdKind::kSloAware:
    case ThresholdKind::kSloAwareWithCaps: {
      const double cap = options_.threshold == ThresholdKind::kSloAware ? 1.0 : r.cap;
      PlacementCost p;
      if (r.instance >= 0) {
        const Instance& inst = instances_[instance_index_.at(r.instance)];
        const int64_t others = inst.next_tokens - r.queued_tokens;
        p.wait = std::max(0.0, inst.busy_until - now);
        p.recompute_step = profile_->StepSeconds(inst.info.tp, others + r.spec.prompt_len + r.spec.output_len);
        p.cache_step = profile_->StepSeconds(inst.info.tp, others + r.block_size);
      }
      r.threshold = th[SelectThreshold(r, th, cap, now, p)];
      ++stats_.threshold_selections;
      return;
    }
  }
}

void Scheduler::DispatchReady(const std::vector<RequestId>& ready, InstanceId from, Seconds now) {
  Instance& src = instances_[instance_index_.at(from)];
  for (RequestId id : ready) {
    RequestState& r = requests_.at(id);
    const bool may_move = !options_.cache || r.NextIsRecompute();
    switch (options_.dispatch) {
      case DispatchKind::kStepLevel: {
        if (may_move) {
          const int64_t stay_batch = src.next_tokens;
          const Seconds stay = std::max(0.0, src.busy_until - now) + profile_->StepSeconds(src.info.tp, stay_batch);
          Seconds t = 0;
          Instance* best = BestStepLevel(r, now, &t);
          if (best != nullptr && best != &src && t < stay * (1 - 1e-9)) Place(r, *best);
        }
        break;
      }
      case DispatchKind::kLeastLoaded:
        break;
      case DispatchKind::kLeastLoadedMigrate: {
        if (may_move) {
          Instance* dst = LeastLoaded();
          const int64_t seq = r.spec.prompt_len + r.spec.output_len;
          const int64_t gap = src.load_tokens - dst->load_tokens;
          if (dst != &src && gap > options_.llumnix_margin_tokens && gap > seq) Place(r, *dst);
        }
        break;
      }
    }
    ChooseThreshold(r, now);
  }
}

void Scheduler::DispatchWaiting(Seconds now) {
  // FCFS with head-of-line blocking: stop at the first request that fits nowhere. That keeps
  // a dispatch cycle O(placements) under overload and never starves a big request.
  while (!waiting_.empty()) {
    const RequestId id = std::get<2>(*waiting_.begin());
    RequestState& r = requests_.at(id);
    Seconds t = 0;
    Instance* best = BestStepLevel(r, now, &t);
    if (best == nullptr) break;
    Place(r, *best);
    ChooseThreshold(r, now);
  }
}

void Scheduler::LaunchIdle(Seconds now, std::vector<Launch>* out) {
  for (Instance& inst : instances_) {
    if (inst.busy || inst.residents.empty()) continue;
    Launch launch;
    launch.instance = inst.info.id;
    for (RequestId id : inst.residents) {
      RequestState& r = requests_.at(id);
      const int tokens = r.NextStepTokens();
      // The token budget caps the batch; who does not fit waits for the next step here.
      if (!launch.batch.empty() && launch.tokens + tokens > options_.token_budget) continue;
      launch.batch.push_back({id, r.threshold, r.NextIsRecompute()});
      launch.tokens += tokens;
      r.in_flight = true;
    }
    inst.busy = true;
    inst.busy_until = now + profile_->StepSeconds(inst.info.tp, launch.tokens);
    out->push_back(std::move(launch));
  }
}

void Scheduler::OnArrival(const RequestSpec& spec, Seconds now, std::vector<Launch>* out) {
  RequestState r;
  r.spec = spec;
  // Per-request bounds from outside are sanitised here so every later clamp is well-defined.
  r.spec.min_threshold = std::clamp(spec.min_threshold, 0.0, 1.0);
  r.spec.max_threshold = std::clamp(spec.max_threshold, r.spec.min_threshold, 1.0);
  r.deadline = spec.arrival + spec.slo;
  r.block_size = options_.block_size;
  r.num_blocks = std::max(1, (spec.output_len + options_.block_size - 1) / options_.block_size);
  r.cache = options_.cache;
  r.threshold = options_.thresholds.front();
  // Until the next load-control pass, a newcomer gets the cap of the newest request of the
  // last pass: Algorithm 2 lowers the newest first, so that is the cap it would likely get.
  r.cap = newest_cap_;
  auto [it, inserted] = requests_.emplace(spec.id, r);
  if (!inserted) return;  // a duplicate id is the driver's bug; the first one stands
  seq_sum_ += spec.prompt_len + spec.output_len;
  ++arrivals_;
  RequestState& rs = it->second;
  Refresh(rs);
  const OrderKey key{-spec.priority, spec.arrival, spec.id};
  order_.insert(key);

  if (options_.threshold == ThresholdKind::kProteus) {
    ProteusPeriod(now);
    ++proteus_arrivals_;
    const double seq = spec.prompt_len + spec.output_len;
    for (size_t k = 0; k < options_.thresholds.size(); ++k) {
      const double steps = spec.output_len / options_.tokens_per_step[k];
      proteus_work_sum_[k] += options_.cache
          ? rs.num_blocks * seq + std::max(0.0, steps - rs.num_blocks) * options_.block_size
          : steps * seq;
    }
    rs.threshold = std::clamp(DrawProteusThreshold(), spec.min_threshold, spec.max_threshold);
  }
  MaybeLoadControl(now);
  if (options_.dispatch == DispatchKind::kStepLevel) {
    waiting_.insert(key);
    DispatchWaiting(now);
  } else {
    Place(rs, *LeastLoaded());
    ChooseThreshold(rs, now);
  }
  LaunchIdle(now, out);
}

void Scheduler::OnStepDone(InstanceId instance, std::span<const StepOutcome> outcomes, Seconds now,
                           std::vector<Launch>* out) {
  auto idx = instance_index_.find(instance);
  if (idx == instance_index_.end()) return;
  Instance& inst = instances_[idx->second];
  inst.busy = false;
  inst.busy_until = now;
  std::vector<RequestId> ready;
  ready.reserve(outcomes.size());
  std::vector<RequestState*> to_refresh;  // one batched prediction for the whole step
  for (const StepOutcome& o : outcomes) {
    auto it = requests_.find(o.id);
    if (it == requests_.end()) continue;
    RequestState& r = it->second;
    r.in_flight = false;
    if (r.Apply(o)) {
      Unplace(r);
      order_.erase({-r.spec.priority, r.spec.arrival, r.spec.id});
      requests_.erase(it);
      continue;
    }
    // Between refreshes a step counts one step off every prediction.
    for (size_t k = 0; k < options_.thresholds.size(); ++k) {
      r.predicted[k] = std::max<double>(r.predicted[k] - 1, r.MinRemainingSteps());
    }
    r.tokens_since_refresh += o.unmasked;
    const int k_refresh = estimator_->refresh_tokens();
    if ((k_refresh > 0 && r.tokens_since_refresh >= k_refresh) || (k_refresh <= 0 && o.block_done)) {
      to_refresh.push_back(&r);
    }
    SetQueuedTokens(r, r.NextStepTokens());
    ready.push_back(o.id);
  }
  RefreshBatch(to_refresh);
  MaybeLoadControl(now);
  DispatchReady(ready, instance, now);
  if (options_.dispatch == DispatchKind::kStepLevel) DispatchWaiting(now);
  LaunchIdle(now, out);
}

void Scheduler::OnTick(Seconds now, std::vector<Launch>* out) {
  if (options_.threshold == ThresholdKind::kProteus) ProteusPeriod(now);
  MaybeLoadControl(now);
  if (options_.dispatch == DispatchKind::kStepLevel) DispatchWaiting(now);
  LaunchIdle(now, out);
}

void Scheduler::MaybeLoadControl(Seconds now) {
  if (options_.threshold != ThresholdKind::kSloAwareWithCaps && options_.threshold != ThresholdKind::kCapsOnly) return;
  if (now - last_load_control_ < options_.load_control_debounce) return;
  RunLoadControl(now);
}

void Scheduler::RunLoadControl(Seconds now) {
  last_load_control_ = now;
  ++stats_.load_control_runs;
  std::vector<RequestState*> ordered;
  ordered.reserve(order_.size());
  double slo_sum = 0;
  for (const OrderKey& key : order_) {
    RequestState& r = requests_.at(std::get<2>(key));
    ordered.push_back(&r);
    slo_sum += r.spec.slo;
  }
  if (ordered.empty()) return;
  const double slo = options_.capacity_slo > 0 ? options_.capacity_slo : slo_sum / ordered.size();
  ComputeCaps(ordered, options_.thresholds, CapacityTokens(slo));
  newest_cap_ = ordered.back()->cap;
}

void Scheduler::ProteusPeriod(Seconds now) {
  while (now >= proteus_next_period_) {
    const double rate = proteus_arrivals_ / options_.proteus_period;
    proteus_rate_ = proteus_rate_ < 0 ? rate
                                      : options_.proteus_smoothing * rate + (1 - options_.proteus_smoothing) * proteus_rate_;
    const size_t n = options_.thresholds.size();
    std::vector<double> work(n, 0.0);
    for (size_t k = 0; k < n; ++k) work[k] = proteus_arrivals_ > 0 ? proteus_work_sum_[k] / proteus_arrivals_ : 0;
    // Maximise mean accuracy subject to rate x mean work <= capacity / headroom: with one
    // budget constraint the optimum mixes at most two thresholds, found along the list.
    double capacity = 0;
    for (const Instance& i : instances_) capacity += i.tokens_per_second;
    const double budget = capacity / options_.proteus_headroom;
    std::vector<double> mix(n, 0.0);
    if (proteus_arrivals_ == 0 || proteus_rate_ * work[0] <= budget) {
      mix[0] = 1;
    } else if (proteus_rate_ * work[n - 1] >= budget) {
      mix[n - 1] = 1;
    } else {
      // The best pair (i < j) with work[i] >= target >= work[j] mixing to exactly the budget.
      const double target = budget / proteus_rate_;
      double best_acc = -1;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
          if (!(work[i] >= target && work[j] <= target) || work[i] == work[j]) continue;
          const double f = (target - work[j]) / (work[i] - work[j]);  // share of i
          const double acc = f * options_.accuracy[i] + (1 - f) * options_.accuracy[j];
          if (acc > best_acc) {
            best_acc = acc;
            std::fill(mix.begin(), mix.end(), 0.0);
            mix[i] = f;
            mix[j] = 1 - f;
          }
        }
      }
      if (best_acc < 0) mix[n - 1] = 1;
    }
    proteus_mix_ = mix;
    proteus_arrivals_ = 0;
    std::fill(std::begin(proteus_work_sum_), std::end(proteus_work_sum_), 0.0);
    proteus_next_period_ += options_.proteus_period;
  }
}

double Scheduler::DrawProteusThreshold() {
  const double u = (SplitMix64(&rng_state_) >> 11) * (1.0 / 9007199254740992.0);
  double acc = 0;
  for (size_t k = 0; k < proteus_mix_.size(); ++k) {
    acc += proteus_mix_[k];
    if (u < acc) return options_.thresholds[k];
  }
  return options_.thresholds.back();
}

}  // namespace tediserve::policy
