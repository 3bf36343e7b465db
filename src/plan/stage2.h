// Stage 2 of the reconfigurator (paper section 3.3, docs/design.md section 10): given the
// instance counts R_d from Stage 1 and the instances running now, assign GPUs to slots so
// that as many running instances as possible keep exactly their GPUs, by an ILP with the
// paper's variables (slot activation u_{n,d,l}, GPU-to-slot a_{n,d,l,g}, preservation m_i),
// then order the changes into plan steps: one launch at a time, each preceded by the
// termination of only those old instances whose GPUs it needs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/mip.h"

namespace tediserve::plan {

struct Placement {
  int id = -1;            // instance id (old instances: theirs; new ones: -1)
  int node = 0;
  int tp = 1;
  std::vector<int> gpus;  // GPU indices on that node, ascending, tp of them
};

struct Stage2Inputs {
  std::vector<int> gpus_per_node;
  std::map<int, int> target;         // R_d: TP degree -> instances wanted (0s allowed)
  std::vector<Placement> current;    // instances running now (ids distinct)
};

struct PlanStep {
  enum Kind { kTerminate, kLaunch } kind = kLaunch;
  Placement instance;
};

struct Stage2Result {
  MipStatus status = MipStatus::kOptimal;
  std::string detail;
  std::vector<Placement> kept;        // old instances that stay on the same GPUs
  std::vector<Placement> terminated;  // old instances that go
  std::vector<Placement> launched;    // new instances with their GPUs
  std::vector<PlanStep> steps;        // in execution order
  double seconds = 0;
  int64_t nodes = 0;
  bool unchanged() const { return terminated.empty() && launched.empty(); }
};

// Errors: no GPUs, a degree < 1, counts that do not pack into the nodes (kFailedPrecondition),
// a current instance with a bad node, GPU set or id, or overlapping another
// (kInvalidArgument).
StatusOr<Stage2Result> PlanStage2(const Stage2Inputs& inputs, const MipOptions& options = {});

// The most instances that can be kept, by enumerating per-node instance counts (small
// clusters; for tests). -1 when the target cannot be packed.
int BruteForceMaxKept(const Stage2Inputs& inputs);

// Checks that `result` is a valid realisation of `inputs`: counts per degree equal the
// target, GPU sets disjoint and of the right size, kept instances unchanged, the steps
// launch every new instance once, terminate every removed one once, and never launch onto a
// GPU still held by a live instance.
Status CheckStage2(const Stage2Inputs& inputs, const Stage2Result& result);

}  // namespace tediserve::plan
