#include "plan/mip.h"

#include <glpk.h>

#include <chrono>
#include <cmath>
#include <csetjmp>
#include <mutex>
#include <set>

namespace tediserve::plan {

const char* MipStatusName(MipStatus s) {
  switch (s) {
    case MipStatus::kOptimal: return "optimal";
    case MipStatus::kFeasible: return "feasible (limit reached)";
    case MipStatus::kInfeasible: return "infeasible";
    case MipStatus::kUnbounded: return "unbounded";
    case MipStatus::kNoSolution: return "no solution (limit reached)";
  }
  return "?";
}

Status MipModel::Validate() const {
  const int n = static_cast<int>(cols.size());
  for (int j = 0; j < n; ++j) {
    const Column& c = cols[j];
    if (std::isnan(c.lb) || std::isnan(c.ub) || c.lb > c.ub || c.lb == kInf || c.ub == -kInf)
      return InvalidArgument("column " + std::to_string(j) + " (" + c.name + ") has bad bounds");
    if (!std::isfinite(c.obj)) return InvalidArgument("column " + c.name + " has a non-finite objective coefficient");
    if (c.integer && ((std::isfinite(c.lb) && c.lb != std::floor(c.lb)) || (std::isfinite(c.ub) && c.ub != std::floor(c.ub))))
      return InvalidArgument("integer column " + c.name + " has a fractional bound");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (std::isnan(r.lb) || std::isnan(r.ub) || r.lb > r.ub || r.lb == kInf || r.ub == -kInf)
      return InvalidArgument("row " + std::to_string(i) + " (" + r.name + ") has bad bounds");
    std::set<int> seen;
    for (const auto& [j, a] : r.terms) {
      if (j < 0 || j >= n) return InvalidArgument("row " + r.name + " names column " + std::to_string(j) + ", out of range");
      if (!seen.insert(j).second) return InvalidArgument("row " + r.name + " names column " + cols[j].name + " twice");
      if (!std::isfinite(a)) return InvalidArgument("row " + r.name + " has a non-finite coefficient");
    }
  }
  return Status::Ok();
}

namespace {

std::mutex g_glpk_mutex;  // GLPK is not thread-safe: one solve at a time in this process

// Plain data only between setjmp and longjmp (no destructors may be skipped).
struct SolveCtx {
  // inputs
  const MipModel* model = nullptr;
  const int* ia = nullptr;
  const int* ja = nullptr;
  const double* ar = nullptr;
  int ne = 0;
  int64_t node_limit = 0;
  int tm_lim_ms = 0;
  double mip_gap = 0;
  const double* initial = nullptr;  // warm start, 1-based (GLPK's convention), or null
  // outputs
  bool initial_offered = false;
  bool initial_accepted = false;
  double* x = nullptr;
  double objective = 0;
  int ret = 0;
  int mip_status = 0;
  int64_t nodes = 0;
  bool stopped_by_nodes = false;
  char message[512] = {0};  // GLPK's terminal output (errors only: messages are off)
  int message_len = 0;
  std::jmp_buf env;
};

int TermHook(void* info, const char* s) {
  auto* ctx = static_cast<SolveCtx*>(info);
  for (; *s != 0 && ctx->message_len < static_cast<int>(sizeof(ctx->message)) - 1; ++s)
    ctx->message[ctx->message_len++] = *s == '\n' ? ' ' : *s;
  return 1;  // never print
}

void ErrorHook(void* info) {
  auto* ctx = static_cast<SolveCtx*>(info);
  // GLPK's state is undefined after an error: free the whole environment (every problem
  // object of this thread with it), then leave.
  glp_free_env();
  std::longjmp(ctx->env, 1);
}

void Callback(glp_tree* tree, void* info) {
  auto* ctx = static_cast<SolveCtx*>(info);
  int a = 0, n = 0, t = 0;
  glp_ios_tree_size(tree, &a, &n, &t);
  ctx->nodes = t;
  const int reason = glp_ios_reason(tree);
  if (ctx->initial != nullptr && !ctx->initial_offered && reason == GLP_IHEUR) {
    ctx->initial_offered = true;
    ctx->initial_accepted = glp_ios_heur_sol(tree, ctx->initial) == 0;
  }
  if (ctx->node_limit > 0 && t > ctx->node_limit && glp_ios_reason(tree) == GLP_ISELECT) {
    ctx->stopped_by_nodes = true;
    glp_ios_terminate(tree);
  }
}

// Whether x (one value per column) is within every column bound and row, to 1e-6 scaled by
// the size of the bound (the values come from an earlier GLPK solve of the same rows, which
// holds them to its own 1e-7).
bool IsFeasible(const MipModel& m, const double* x) {
  constexpr double kTol = 1e-6;
  auto within = [](double v, double lb, double ub) {
    return v >= lb - kTol * (1 + std::abs(std::isfinite(lb) ? lb : 0)) && v <= ub + kTol * (1 + std::abs(std::isfinite(ub) ? ub : 0));
  };
  for (size_t j = 0; j < m.cols.size(); ++j)
    if (!within(x[j], m.cols[j].lb, m.cols[j].ub)) return false;
  for (const MipModel::Row& r : m.rows) {
    double a = 0;
    for (const auto& [j, c] : r.terms) a += c * x[j];
    if (!within(a, r.lb, r.ub)) return false;
  }
  return true;
}

// Returns false when GLPK raised an error (the hook fired).
bool GuardedSolve(SolveCtx* ctx) {
  if (setjmp(ctx->env) != 0) {
    glp_term_hook(nullptr, nullptr);
    glp_error_hook(nullptr, nullptr);
    return false;
  }
  glp_error_hook(ErrorHook, ctx);
  glp_term_hook(TermHook, ctx);
  const MipModel& m = *ctx->model;
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, m.maximize ? GLP_MAX : GLP_MIN);
  const int n = static_cast<int>(m.cols.size());
  const int nr = static_cast<int>(m.rows.size());
  auto bound_type = [](double lb, double ub) {
    const bool has_lb = std::isfinite(lb), has_ub = std::isfinite(ub);
    if (has_lb && has_ub) return lb == ub ? GLP_FX : GLP_DB;
    if (has_lb) return GLP_LO;
    if (has_ub) return GLP_UP;
    return GLP_FR;
  };
  glp_add_cols(lp, n);
  for (int j = 0; j < n; ++j) {
    const MipModel::Column& c = m.cols[j];
    glp_set_col_bnds(lp, j + 1, bound_type(c.lb, c.ub), std::isfinite(c.lb) ? c.lb : 0, std::isfinite(c.ub) ? c.ub : 0);
    glp_set_obj_coef(lp, j + 1, c.obj);
    if (c.integer) glp_set_col_kind(lp, j + 1, GLP_IV);
  }
  if (nr > 0) glp_add_rows(lp, nr);
  for (int i = 0; i < nr; ++i) {
    const MipModel::Row& r = m.rows[i];
    glp_set_row_bnds(lp, i + 1, bound_type(r.lb, r.ub), std::isfinite(r.lb) ? r.lb : 0, std::isfinite(r.ub) ? r.ub : 0);
  }
  if (ctx->ne > 0) glp_load_matrix(lp, ctx->ne, ctx->ia, ctx->ja, ctx->ar);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_ON;
  if (ctx->initial != nullptr) {
    // glp_ios_heur_sol takes a solution of the problem the search runs on: without the MIP
    // presolver that is this problem, whose LP relaxation must then be solved first.
    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = GLP_MSG_OFF;
    if (glp_simplex(lp, &sm) == 0 && glp_get_status(lp) == GLP_OPT) {
      parm.presolve = GLP_OFF;
    } else {
      ctx->initial = nullptr;  // no optimal relaxation here: the presolver reports the outcome
    }
  }
  parm.cb_func = Callback;
  parm.cb_info = ctx;
  if (ctx->tm_lim_ms > 0) parm.tm_lim = ctx->tm_lim_ms;
  parm.mip_gap = ctx->mip_gap;
  ctx->ret = glp_intopt(lp, &parm);
  ctx->mip_status = glp_mip_status(lp);
  if (ctx->mip_status == GLP_OPT || ctx->mip_status == GLP_FEAS) {
    ctx->objective = glp_mip_obj_val(lp);
    for (int j = 0; j < n; ++j) ctx->x[j] = glp_mip_col_val(lp, j + 1);
  }
  glp_delete_prob(lp);
  glp_term_hook(nullptr, nullptr);
  glp_error_hook(nullptr, nullptr);
  return true;
}

bool GuardedBadCall(SolveCtx* ctx) {
  if (setjmp(ctx->env) != 0) {
    glp_term_hook(nullptr, nullptr);
    glp_error_hook(nullptr, nullptr);
    return false;
  }
  glp_error_hook(ErrorHook, ctx);
  glp_term_hook(TermHook, ctx);
  glp_prob* lp = glp_create_prob();
  glp_add_cols(lp, 1);
  glp_set_col_bnds(lp, 5, GLP_LO, 0, 0);  // column 5 does not exist: GLPK raises an error
  glp_delete_prob(lp);
  glp_term_hook(nullptr, nullptr);
  glp_error_hook(nullptr, nullptr);
  return true;
}

const char* RetName(int ret) {
  switch (ret) {
    case 0: return "0";
    case GLP_EBOUND: return "GLP_EBOUND";
    case GLP_EROOT: return "GLP_EROOT";
    case GLP_ENOPFS: return "GLP_ENOPFS (no primal feasible solution)";
    case GLP_ENODFS: return "GLP_ENODFS (no dual feasible solution)";
    case GLP_EFAIL: return "GLP_EFAIL";
    case GLP_EMIPGAP: return "GLP_EMIPGAP (gap reached)";
    case GLP_ETMLIM: return "GLP_ETMLIM (time limit)";
    case GLP_ESTOP: return "GLP_ESTOP (node limit)";
    default: return "unknown";
  }
}

const char* MipStatusGlpName(int s) {
  switch (s) {
    case GLP_OPT: return "GLP_OPT";
    case GLP_FEAS: return "GLP_FEAS";
    case GLP_NOFEAS: return "GLP_NOFEAS";
    case GLP_UNDEF: return "GLP_UNDEF";
    default: return "unknown";
  }
}

}  // namespace

StatusOr<MipResult> SolveMip(const MipModel& model, const MipOptions& options) {
  RETURN_IF_ERROR(model.Validate());
  if (options.node_limit < 0 || options.time_limit_s < 0 || !(options.mip_gap >= 0))
    return InvalidArgument("MIP options: limits and gap must be >= 0");
  const auto t0 = std::chrono::steady_clock::now();
  MipResult res;
  const int n = static_cast<int>(model.cols.size());
  if (n == 0) {  // nothing to choose: feasible iff every row holds at 0
    for (const MipModel::Row& r : model.rows)
      if (r.lb > 0 || r.ub < 0) {
        res.status = MipStatus::kInfeasible;
        res.detail = "empty model with an unsatisfiable row";
        return res;
      }
    res.status = MipStatus::kOptimal;
    res.detail = "empty model";
    return res;
  }
  std::vector<int> ia(1, 0), ja(1, 0);
  std::vector<double> ar(1, 0);
  for (size_t i = 0; i < model.rows.size(); ++i)
    for (const auto& [j, a] : model.rows[i].terms) {
      if (a == 0) continue;
      ia.push_back(static_cast<int>(i) + 1);
      ja.push_back(j + 1);
      ar.push_back(a);
    }
  std::vector<double> x(n, 0.0);
  SolveCtx ctx;
  ctx.model = &model;
  ctx.ia = ia.data();
  ctx.ja = ja.data();
  ctx.ar = ar.data();
  ctx.ne = static_cast<int>(ia.size()) - 1;
  ctx.node_limit = options.node_limit;
  ctx.tm_lim_ms = options.time_limit_s > 0 ? static_cast<int>(std::min(2.0e9, std::ceil(options.time_limit_s * 1000))) : 0;
  ctx.mip_gap = options.mip_gap;
  ctx.x = x.data();
  std::vector<double> initial;
  if (!options.initial.empty()) {
    if (static_cast<int>(options.initial.size()) != n)
      return InvalidArgument("MIP options: the initial solution has " + std::to_string(options.initial.size()) + " values for " +
                             std::to_string(n) + " columns");
    initial.assign(1, 0.0);  // GLPK counts columns from 1
    for (int j = 0; j < n; ++j) {
      const double v = options.initial[j];
      if (!std::isfinite(v)) return InvalidArgument("MIP options: the initial solution has a non-finite value");
      initial.push_back(model.cols[j].integer ? std::round(v) : v);
    }
    // glp_ios_heur_sol does not check primal feasibility: a solution that breaks a bound or
    // a row would be taken as the incumbent. Check here; an infeasible one is not offered.
    if (IsFeasible(model, initial.data() + 1)) ctx.initial = initial.data();
  }
  bool ok = false;
  {
    std::lock_guard<std::mutex> lock(g_glpk_mutex);
    ok = GuardedSolve(&ctx);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ok) return Internal(std::string("GLPK reported an error: ") + ctx.message);
  res.nodes = ctx.nodes;
  res.initial_accepted = ctx.initial_accepted;
  res.detail = std::string("glp_intopt ") + RetName(ctx.ret) + ", glp_mip_status " + MipStatusGlpName(ctx.mip_status);
  if (ctx.mip_status == GLP_OPT) {
    res.status = MipStatus::kOptimal;
  } else if (ctx.mip_status == GLP_FEAS) {
    res.status = MipStatus::kFeasible;
  } else if (ctx.mip_status == GLP_NOFEAS || ctx.ret == GLP_ENOPFS) {
    res.status = MipStatus::kInfeasible;
  } else if (ctx.ret == GLP_ENODFS) {
    res.status = MipStatus::kUnbounded;
  } else if (ctx.ret == GLP_ESTOP || ctx.ret == GLP_ETMLIM || ctx.ret == GLP_EMIPGAP) {
    res.status = MipStatus::kNoSolution;
  } else {
    return Internal("GLPK failed: " + res.detail);
  }
  if (res.has_solution()) {
    res.x = std::move(x);
    res.objective = ctx.objective;
  }
  return res;
}

namespace internal {
Status TriggerGlpkErrorForTest() {
  SolveCtx ctx;
  bool ok = false;
  {
    std::lock_guard<std::mutex> lock(g_glpk_mutex);
    ok = GuardedBadCall(&ctx);
  }
  if (ok) return Status::Ok();
  return Internal(std::string("GLPK reported an error: ") + ctx.message);
}
}  // namespace internal

}  // namespace tediserve::plan
