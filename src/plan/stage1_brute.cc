#include "plan/stage1_brute.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tediserve::plan {

bool Packable(const std::vector<int>& gpus_per_node, const std::vector<int>& degrees, const std::vector<int>& counts) {
  // Place instances largest degree first, trying every node with room (exhaustive).
  std::vector<int> items;
  std::vector<int> order(degrees.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return degrees[a] > degrees[b]; });
  for (int i : order)
    for (int k = 0; k < counts[i]; ++k) items.push_back(degrees[i]);
  std::vector<int> free = gpus_per_node;
  std::function<bool(size_t)> place = [&](size_t i) {
    if (i == items.size()) return true;
    std::vector<int> tried;
    for (size_t n = 0; n < free.size(); ++n) {
      if (free[n] < items[i] || std::find(tried.begin(), tried.end(), free[n]) != tried.end()) continue;
      tried.push_back(free[n]);  // nodes with the same room are interchangeable
      free[n] -= items[i];
      const bool ok = place(i + 1);
      free[n] += items[i];
      if (ok) return true;
    }
    return false;
  };
  return place(0);
}

namespace {

struct Lex {
  double o1, o2, o3;
};

// a better than b?
bool Better(const Lex& a, const Lex& b, double tol) {
  auto close = [tol](double x, double y) { return std::abs(x - y) <= tol * std::max(1.0, std::max(std::abs(x), std::abs(y))); };
  if (!close(a.o1, b.o1)) return a.o1 > b.o1;
  if (!close(a.o2, b.o2)) return a.o2 < b.o2;
  return a.o3 < b.o3 - 0.5;
}

}  // namespace

StatusOr<BruteForceStage1Result> BruteForceStage1(const Stage1Inputs& inputs, const Stage1Options& options) {
  ASSIGN_OR_RETURN(Stage1Problem p, MakeStage1Problem(inputs));
  BruteForceStage1Result out;
  if (p.classes.empty()) return out;
  const int nd = static_cast<int>(p.degrees.size());
  const int nk = static_cast<int>(p.classes.size());
  const int nc = static_cast<int>(p.thresholds.size());
  const int B = p.block_size;
  int total = 0;
  for (int g : p.gpus_per_node) total += g;
  double rps_sum = 0, token_sum = 0;
  for (const LengthClass& c : p.classes) {
    rps_sum += c.rps;
    token_sum += c.rps * c.output_len;
  }
  const double tmin = *std::min_element(p.tokens_per_step.begin(), p.tokens_per_step.end());
  const double tol = std::max(1e-6, options.tolerance * 10);
  Lex best{-kInf, kInf, kInf};
  std::vector<int> X(nd, 0), zb(nd, 0), zcb(nd, 0);
  auto solve_lp = [&]() -> Status {
    MipModel m;
    std::vector<std::vector<int>> s(nk), sc(nk), r(nk), q(nk);
    std::vector<std::pair<int, double>> o1, o2;
    std::vector<std::vector<std::pair<int, double>>> stab(nd);
    for (int k = 0; k < nk; ++k) {
      const LengthClass& c = p.classes[k];
      const double blocks = c.output_len / B;
      const int seq = c.prompt_len + c.output_len;
      std::vector<std::pair<int, double>> rc, tok, cs, rd, slo;
      for (int ci = 0; ci < nc; ++ci) {
        s[k].push_back(m.AddCol("s", 0, kInf, false));
        sc[k].push_back(m.AddCol("sc", 0, kInf, false));
        rc.emplace_back(s[k][ci], 1);
        tok.emplace_back(s[k][ci], p.tokens_per_step[ci]);
        tok.emplace_back(sc[k][ci], p.tokens_per_step[ci]);
        cs.emplace_back(sc[k][ci], -1);
        const double coef = c.rps * p.thresholds[ci] * p.tokens_per_step[ci] / token_sum;
        o1.emplace_back(s[k][ci], coef);
        o1.emplace_back(sc[k][ci], coef);
      }
      (void)tmin;
      for (int d = 0; d < nd; ++d) {
        const int rb = p.recompute_bins[zb[d]], cb = p.cache_bins[zcb[d]];
        const double rl = p.rec_lat_k[k][d][zb[d]], cl = p.cache_lat[d][zcb[d]];
        r[k].push_back(m.AddCol("r", 0, kInf, false));
        q[k].push_back(m.AddCol("q", 0, cb >= B ? kInf : 0, false));
        rd.emplace_back(r[k][d], 1);
        cs.emplace_back(q[k][d], 1);
        slo.emplace_back(r[k][d], rl);
        slo.emplace_back(q[k][d], cl);
        o2.emplace_back(r[k][d], c.rps * rl / rps_sum);
        o2.emplace_back(q[k][d], c.rps * cl / rps_sum);
        stab[d].emplace_back(r[k][d], c.rps * seq * rl / std::max(rb, seq));
        stab[d].emplace_back(q[k][d], c.rps * B * cl / cb);
      }
      m.AddRow("blocks", blocks, blocks, rc);
      m.AddRow("blocks_d", blocks, blocks, rd);
      m.AddRow("tokens", c.output_len, c.output_len, tok);
      m.AddRow("cache", 0, 0, cs);
      m.AddRow("slo", -kInf, c.slo_s, slo);
    }
    for (int d = 0; d < nd; ++d) m.AddRow("stable", -kInf, X[d], stab[d]);
    for (const auto& [j, a] : o1) m.cols[j].obj += a;
    m.maximize = true;
    ASSIGN_OR_RETURN(MipResult r1, SolveMip(m));
    ++out.combinations;
    if (!r1.has_solution()) return Status::Ok();
    const double v1 = r1.objective;
    m.AddRow("fix1", v1 - options.tolerance * std::max(1.0, std::abs(v1)) - 1e-9, kInf, o1);
    // o1 may list a column twice? No: each s / sc column appears once.
    for (auto& c : m.cols) c.obj = 0;
    for (const auto& [j, a] : o2) m.cols[j].obj += a;
    m.maximize = false;
    ASSIGN_OR_RETURN(MipResult r2, SolveMip(m));
    if (!r2.has_solution()) return Status::Ok();
    double o3 = 0;
    const double M = options.use_all_gpus ? total + 1.0 : 0.0;
    for (int d = 0; d < nd; ++d) o3 += X[d] * (1.0 - M * p.degrees[d]);
    const Lex cand{v1, r2.objective, o3};
    if (Better(cand, best, tol)) {
      best = cand;
      out.feasible = true;
      out.mean_threshold = v1;
      out.mean_latency_s = r2.objective;
      out.third = o3;
      out.instances.clear();
      for (int d = 0; d < nd; ++d)
        if (X[d] > 0) out.instances[p.degrees[d]] = X[d];
    }
    return Status::Ok();
  };
  std::function<Status(int)> bins = [&](int i) -> Status {
    if (i == 2 * nd) return solve_lp();
    const int d = i % nd;
    if (p.mixed_batches && i >= nd) {  // one batch: the cache bin is the recompute bin
      zcb[d] = zb[d];
      return bins(i + 1);
    }
    std::vector<int>& v = i < nd ? zb : zcb;
    const int nb = static_cast<int>(i < nd ? p.recompute_bins.size() : p.cache_bins.size());
    for (int b = 0; b < nb; ++b) {
      v[d] = b;
      RETURN_IF_ERROR(bins(i + 1));
    }
    return Status::Ok();
  };
  std::function<Status(int)> layouts = [&](int d) -> Status {
    if (d == nd) return Packable(p.gpus_per_node, p.degrees, X) ? bins(0) : Status::Ok();
    for (int n = 0; n * p.degrees[d] <= total; ++n) {
      X[d] = n;
      RETURN_IF_ERROR(layouts(d + 1));
    }
    X[d] = 0;
    return Status::Ok();
  };
  RETURN_IF_ERROR(layouts(0));
  return out;
}

}  // namespace tediserve::plan
