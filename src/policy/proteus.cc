#include "policy/proteus.h"

#include <algorithm>
#include <cmath>

namespace tediserve::policy {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

ProteusMix::ProteusMix(Options options)
    : o_(std::move(options)), mix_(o_.thresholds.size(), 0.0), next_period_(o_.period),
      work_sum_(o_.thresholds.size(), 0.0), pass_sum_(o_.thresholds.size(), 0.0), rng_state_(o_.seed ^ 0x5DEECE66Dull) {
  if (!mix_.empty()) mix_[0] = 1.0;
}

void ProteusMix::AdvanceTo(Seconds now, double capacity_tokens_per_second, double step_seconds,
                           double late_fraction) {
  while (now >= next_period_) {
    const double rate = arrivals_ / o_.period;
    if (rate_ < 0) {
      rate_ = rate;
      periods_averaged_ = 1;
    } else if (o_.change_z > 0 && std::abs(rate - rate_) <= o_.change_z * std::sqrt(std::max(rate_, 1e-9) / o_.period)) {
      // Within change_z Poisson standard deviations of the estimate: the same regime, so
      // average it in (a running mean over up to `window` periods).
      periods_averaged_ = std::min(periods_averaged_ + 1, o_.window);
      rate_ += (rate - rate_) / periods_averaged_;
    } else {
      rate_ = o_.smoothing * rate + (1 - o_.smoothing) * rate_;
      periods_averaged_ = 2;  // a change: the next same-regime period weighs 1/3
    }
    const double high = high_work_sum_ / o_.period;
    high_demand_ = high_demand_ < 0 ? high : o_.smoothing * high + (1 - o_.smoothing) * high_demand_;
    const size_t n = o_.thresholds.size();
    std::vector<double> work(n, 0.0);
    for (size_t k = 0; k < n; ++k) work[k] = arrivals_ > 0 ? work_sum_[k] / arrivals_ : 0;
    // Maximise mean accuracy subject to rate x mean work <= capacity / headroom: with one
    // budget constraint the optimum mixes at most two thresholds, found along the list.
    const double headroom = o_.headroom_slo_ratio > 0 && arrivals_ > 0 && slo_sum_ > 0
                                ? std::min(o_.headroom, 1 + o_.headroom_slo_ratio * o_.period / (slo_sum_ / arrivals_))
                                : o_.headroom;
    const double budget = std::max(0.0, capacity_tokens_per_second / headroom - high_demand_);
    std::vector<double> mix(n, 0.0);
    if (arrivals_ == 0 || rate_ * work[0] <= budget) {
      mix[0] = 1;
    } else if (rate_ * work[n - 1] >= budget) {
      mix[n - 1] = 1;
    } else {
      // The best pair (i < j) with work[i] >= target >= work[j] mixing to exactly the budget.
      const double target = budget / rate_;
      double best_acc = -1;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
          if (!(work[i] >= target && work[j] <= target) || work[i] == work[j]) continue;
          const double f = (target - work[j]) / (work[i] - work[j]);  // share of i
          const double acc = f * o_.accuracy[i] + (1 - f) * o_.accuracy[j];
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
    // most_correct: the plan above serves every request at the budget, whatever accuracy that
    // takes. Where the work hardly depends on the threshold (recompute steps dominate) that can
    // trade much accuracy for a little capacity. Weigh the plan and each single candidate by
    // the correct answers they deliver in time, accuracy x min(1, budget / (rate x work)), and
    // take a single candidate when it beats the plan by the margin (the fluid model's served
    // share is optimistic above the budget, where queues grow).
    if (o_.most_correct && mix[0] < 1) {  // mix[0] < 1 implies rate_ > 0
      const auto served = [&](double w) { return w > 0 ? std::min(1.0, budget / (rate_ * w)) : 1.0; };
      double mix_work = 0, mix_acc = 0;
      for (size_t k = 0; k < n; ++k) {
        mix_work += mix[k] * work[k];
        mix_acc += mix[k] * o_.accuracy[k];
      }
      double best_value = served(mix_work) * mix_acc * (1 + o_.most_correct_margin);
      int best = -1;
      for (size_t k = 0; k < n; ++k) {
        const double value = served(work[k]) * o_.accuracy[k];
        if (value > best_value * (1 + 1e-9)) {
          best_value = value;
          best = static_cast<int>(k);
        }
      }
      if (best >= 0) {
        std::fill(mix.begin(), mix.end(), 0.0);
        mix[best] = 1;
      }
    }
    if (o_.latency_fraction > 0 && step_seconds > 0 && arrivals_ > 0 && slo_sum_ > 0 &&
        late_fraction >= o_.latency_miss_target) {
      const double limit = o_.latency_fraction * slo_sum_ / static_cast<double>(arrivals_);
      // The mix's mean passes x step time within the limit: shares move down from the
      // highest candidate to the next, the last move fractional.
      const double max_passes = limit / step_seconds * static_cast<double>(arrivals_);
      double passes = 0;
      for (size_t k = 0; k < n; ++k) passes += mix[k] * pass_sum_[k];
      for (size_t k = 0; k + 1 < n && passes > max_passes * (1 + 1e-12); ++k) {
        const double saving = pass_sum_[k] - pass_sum_[k + 1];  // per unit of share moved
        const double moved = saving > 0 ? std::min(mix[k], (passes - max_passes) / saving) : mix[k];
        mix[k] -= moved;
        mix[k + 1] += moved;
        passes -= moved * saving;
      }
    }
    mix_ = mix;
    arrivals_ = 0;
    high_work_sum_ = 0;
    slo_sum_ = 0;
    std::fill(work_sum_.begin(), work_sum_.end(), 0.0);
    std::fill(pass_sum_.begin(), pass_sum_.end(), 0.0);
    next_period_ += o_.period;
  }
}

double ProteusMix::OnArrival(const RequestSpec& spec, int num_blocks, double min_threshold, double max_threshold) {
  const double seq = spec.prompt_len + spec.output_len;
  auto steps = [&](size_t k) { return spec.output_len / o_.tokens_per_step[k]; };
  auto work = [&](size_t k) {
    return o_.cache ? num_blocks * seq + std::max(0.0, steps(k) - num_blocks) * o_.block_size : steps(k) * seq;
  };
  if (o_.reserve_priority && spec.priority > 0 && !o_.thresholds.empty()) {
    high_work_sum_ += work(0);
    return std::clamp(o_.thresholds.front(), min_threshold, max_threshold);
  }
  ++arrivals_;
  slo_sum_ += spec.slo;
  for (size_t k = 0; k < o_.thresholds.size(); ++k) {
    work_sum_[k] += work(k);
    pass_sum_[k] += std::max(static_cast<double>(num_blocks), steps(k));  // a block takes a pass at least
  }
  return std::clamp(Draw(), min_threshold, max_threshold);
}

double ProteusMix::Draw() {
  const double u = (SplitMix64(&rng_state_) >> 11) * (1.0 / 9007199254740992.0);
  double acc = 0;
  for (size_t k = 0; k < mix_.size(); ++k) {
    acc += mix_[k];
    if (u < acc) return o_.thresholds[k];
  }
  return o_.thresholds.back();
}

}  // namespace tediserve::policy
