// A small mixed-integer program model and its solver (GLPK), for the reconfiguration planner
// (docs/design.md section 10). GLPK is not thread-safe and aborts the process on bad input
// unless its error hook is set: SolveMip holds one process-wide mutex around every solve,
// installs the hook (a GLPK error becomes a kInternal Status, never an abort), and reads the
// solution status (glp_mip_status), never trusting a 0 return alone.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tediserve::plan {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct MipModel {
  struct Column {
    std::string name;
    double lb = 0, ub = kInf;  // -kInf / kInf: unbounded
    bool integer = false;
    double obj = 0;
  };
  struct Row {
    std::string name;
    double lb = -kInf, ub = kInf;
    std::vector<std::pair<int, double>> terms;  // (column index, coefficient)
  };
  bool maximize = false;
  std::vector<Column> cols;
  std::vector<Row> rows;

  int AddCol(std::string name, double lb, double ub, bool integer, double obj = 0) {
    cols.push_back({std::move(name), lb, ub, integer, obj});
    return static_cast<int>(cols.size()) - 1;
  }
  int AddRow(std::string name, double lb, double ub, std::vector<std::pair<int, double>> terms) {
    rows.push_back({std::move(name), lb, ub, std::move(terms)});
    return static_cast<int>(rows.size()) - 1;
  }
  // Structural checks (indices, duplicates, finite coefficients, lb <= ub): a model that
  // fails them never reaches GLPK.
  Status Validate() const;
};

enum class MipStatus {
  kOptimal,     // proven optimal (within mip_gap)
  kFeasible,    // a limit stopped the search; the best solution found is returned
  kInfeasible,  // no solution exists
  kUnbounded,   // the LP relaxation is unbounded
  kNoSolution,  // a limit stopped the search before any solution was found
};
const char* MipStatusName(MipStatus s);

struct MipOptions {
  // Branch-and-bound nodes before the search stops (0: no limit). Deterministic: the same
  // model gives the same answer on any machine, unlike a wall-time limit.
  int64_t node_limit = 0;
  // Wall-clock limit in seconds (0: none). Not deterministic; for interactive use only.
  double time_limit_s = 0;
  double mip_gap = 0;  // relative gap at which the search stops (0: prove optimality)
  // A known solution (one value per column) offered to the search as its first incumbent
  // (warm start): nodes that cannot beat it are pruned from the start. Integer columns are
  // rounded; a vector outside a bound or row (1e-6, scaled) is not offered
  // (MipResult::initial_accepted says whether it was taken). The optimum is the same either
  // way. It costs GLPK's MIP presolver (the incumbent must be in the problem's own columns),
  // so it pays where finding a first incumbent is the hard part.
  std::vector<double> initial;
};

struct MipResult {
  MipStatus status = MipStatus::kNoSolution;
  std::string detail;        // GLPK's return code and solution status, in words
  std::vector<double> x;     // column values (empty unless kOptimal / kFeasible)
  double objective = 0;
  int64_t nodes = 0;         // branch-and-bound nodes created
  double seconds = 0;        // wall time of the solve (reporting only)
  bool initial_accepted = false;  // MipOptions::initial was feasible and used
  bool has_solution() const { return status == MipStatus::kOptimal || status == MipStatus::kFeasible; }
};

// Solves `model`. Errors: kInvalidArgument for a model that fails Validate, kInternal when
// GLPK reports an error (its message is in the Status). Infeasible and unbounded models are
// results, not errors.
StatusOr<MipResult> SolveMip(const MipModel& model, const MipOptions& options = {});

namespace internal {
// Calls GLPK with an invalid argument under the same guard as SolveMip (tests: the error hook
// turns GLPK's abort into a Status, and GLPK still works afterwards).
Status TriggerGlpkErrorForTest();
}  // namespace internal

}  // namespace tediserve::plan
