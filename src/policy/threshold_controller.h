// The two levels of threshold control (docs/design.md sections 3.1, 3.2), as pure functions
// over request states so they can be tested by hand. Thresholds are always given high to
// low, and r.predicted[k] is the predicted remaining steps under thresholds[k].
#pragma once

#include <span>

#include "policy/request_state.h"

namespace tediserve::policy {

// What Algorithm 1 needs to know about the instance a request is placed on.
struct PlacementCost {
  Seconds wait = 0;            // until the instance can start this request's next step
  Seconds recompute_step = 0;  // l_d(n_rec_i): a step of i's batch with r recomputing
  Seconds cache_step = 0;      // l_d(n_cache_i): a step of i's batch with r on a cache step
};

// Estimated time to finish r if it used thresholds[k] from now on, on that placement, with
// the predicted remaining steps multiplied by `steps_factor` (1: the prediction as is).
Seconds EstimateRemainingSeconds(const RequestState& r, int k, const PlacementCost& p, double steps_factor = 1.0);

// Index range of the thresholds r may use: at most `cap`, within r's own bounds; a request's
// own bounds win over the cap. Returns [first, last] (first <= last), indices into thresholds.
std::pair<int, int> AllowedRange(const RequestState& r, std::span<const double> thresholds, double cap);

// Algorithm 1: the highest allowed threshold whose estimate fits the remaining budget
// (deadline - now); if none fits, the lowest allowed. Returns an index into thresholds.
// `steps_factor` scales the predicted steps (the default policy's margin for a request
// slower than predicted; 1 in the paper's Algorithm 1).
// With `accuracy` (offline accuracy per threshold, as thresholds), the rescue takes a lower
// threshold only where the accuracy per token of work (RequestLoadTokens) is at least that of
// the highest allowed one: lowering must not cost more accuracy than the work it saves is
// worth at the request's own rate. (Where recompute steps dominate the work, a lower
// threshold saves little and costs much: the request stays.) A request that no such
// threshold can bring in on time keeps a higher threshold than the lowest allowed when that
// one gives more accuracy per token of work (RequestLoadTokens) than the lowest by more than
// `margin` (0.1: 10%); the highest such value wins (ties: the higher threshold). It misses its
// SLO either way: the lowest threshold saves the others little work when the work hardly
// depends on the threshold (recompute steps dominate) while costing its answer much accuracy.
int SelectThreshold(const RequestState& r, std::span<const double> thresholds, double cap,
                    Seconds now, const PlacementCost& p, double steps_factor = 1.0,
                    std::span<const double> accuracy = {}, double margin = 0);

// L_r(c) in tokens pushed through the network (docs/design.md section 3.2).
double RequestLoadTokens(const RequestState& r, int k);

// Algorithm 2: walk `ordered` (priority first, then arrival) and give each request the
// highest cap such that committed load + its load at the cap + the rest at the lowest
// threshold fits `capacity_tokens`; else the lowest. Sets r->cap. O(N x |C|).
void ComputeCaps(std::span<RequestState* const> ordered, std::span<const double> thresholds,
                 double capacity_tokens);

}  // namespace tediserve::policy
