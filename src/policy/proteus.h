// Proteus' threshold mix (docs/design.md section 3.5): every period it picks the mix of
// candidate thresholds that maximises expected accuracy subject to capacity >= headroom x
// the smoothed observed demand; each arriving request draws one threshold from the mix and
// keeps it. Kept out of the Scheduler: it is one baseline's state, not the core's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policy/request.h"

namespace tediserve::policy {

class ProteusMix {
 public:
  struct Options {
    std::vector<double> thresholds;       // candidates, high to low
    std::vector<double> tokens_per_step;  // offline T_c per candidate
    std::vector<double> accuracy;         // offline accuracy per candidate
    Seconds period = 10;
    double headroom = 1.05;
    double smoothing = 0.5;  // weight of the newest period's arrival rate
    // Change-aware rate estimate (0: off, Proteus' exponential smoothing alone): a period
    // whose arrival rate lies within change_z Poisson standard deviations (sqrt(rate /
    // period)) of the estimate is averaged in over up to `window` periods, so a steady load's
    // estimate stops swinging with sampling noise; a period outside it is a change and is
    // smoothed in with `smoothing` as before.
    double change_z = 0;
    int window = 6;
    // SLO-relative headroom (0: off, the constant `headroom`): min(headroom, 1 + ratio x
    // period / the mean SLO of the period's arrivals). A plan made on a rate estimate that is
    // off runs for about a period before the next one corrects it; the backlog it builds is
    // that error times the period, and what a request can absorb is its SLO. So the margin a
    // plan needs shrinks as SLOs grow against the period (long outputs, loose SLOs); `headroom`
    // stays the most it reserves (SLOs short against the period: the rescue's job).
    double headroom_slo_ratio = 0;
    int block_size = 32;
    bool cache = true;
    uint64_t seed = 1;
    // Priority requests (priority > 0) get the highest candidate, and the mix of the others
    // is planned in the capacity they leave (paper 3.5). Proteus itself does not know
    // priorities; the frontier policy (`tediserve`) sets this.
    bool reserve_priority = false;
    // Weigh the planned mix against each single candidate by the correct answers they deliver
    // in time, accuracy x min(1, budget / (rate x work)), and plan the best single candidate
    // when it beats the mix by most_correct_margin: the mix serves everyone at the budget
    // even where that costs much accuracy for little work (recompute steps dominate), or,
    // over capacity at any threshold, sinks to the lowest. The frontier policy sets it.
    bool most_correct = false;
    double most_correct_margin = 0.1;
    // Latency cap (0: off): capacity is not the only limit. A request's latency is about its
    // passes (steps) times the step time of the batches it runs in, and a higher threshold
    // costs many more passes than tokens where recompute tokens dominate (long prompts). So
    // when a period closes, the mix's mean passes per arrival times the period's measured
    // mean step time (AdvanceTo's step_seconds) is held to this fraction of the arrivals'
    // mean SLO: shares move from the highest candidate down to the next, one candidate at a
    // time, the last move fractional (all on the lowest where even that is over).
    double latency_fraction = 0;
    // The cap binds only after a period in which at least this share of the requests that
    // finished missed their SLO (AdvanceTo's late_fraction; 0: always). Where the load leaves
    // room, a long step time alone is no reason to give up quality.
    double latency_miss_target = 0;
  };
  explicit ProteusMix(Options options);

  // Closes every period that ended by `now`; `capacity_tokens_per_second` is the cluster's
  // (accepting instances) at the token budget, `step_seconds` the mean measured time of the
  // step batches that returned in the period (0: none, no latency cap).
  // `late_fraction`: the share of the period's finished requests that missed their SLO.
  void AdvanceTo(Seconds now, double capacity_tokens_per_second, double step_seconds = 0,
                 double late_fraction = 1);
  // Counts an arrival into the current period's demand and draws its threshold, clamped to
  // [min_threshold, max_threshold] (which the caller has already made consistent).
  double OnArrival(const RequestSpec& spec, int num_blocks, double min_threshold, double max_threshold);
  Seconds next_period() const { return next_period_; }
  const std::vector<double>& mix() const { return mix_; }
  double rate() const { return rate_; }  // the arrival-rate estimate (-1 before a period closed)

 private:
  double Draw();
  Options o_;
  std::vector<double> mix_;
  Seconds next_period_ = 0;
  int64_t arrivals_ = 0;   // in the current period
  double rate_ = -1;       // smoothed arrivals per second; -1 before the first period
  std::vector<double> work_sum_;  // tokens of this period's arrivals at each candidate
  std::vector<double> pass_sum_;  // passes (steps) of this period's arrivals at each candidate
  double slo_sum_ = 0;            // SLO seconds of this period's arrivals
  double high_work_sum_ = 0;      // their tokens at the highest candidate
  double high_demand_ = -1;       // smoothed tokens per second of priority requests
  uint64_t rng_state_;
  int periods_averaged_ = 0;
};

}  // namespace tediserve::policy
