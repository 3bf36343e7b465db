#include "plan/stage1.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>

namespace tediserve::plan {

const char* Stage1OutcomeName(Stage1Outcome o) {
  switch (o) {
    case Stage1Outcome::kPlanned: return "planned";
    case Stage1Outcome::kInfeasibleFallback: return "infeasible: fallback";
    case Stage1Outcome::kEmptyWorkload: return "empty workload";
  }
  return "?";
}

namespace {

constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxNodes = 4096;
constexpr int kMaxClasses = 1000;
constexpr size_t kMaxPatterns = 20000;

std::string ClassName(const LengthClass& c) {
  return "class (prompt " + std::to_string(c.prompt_len) + ", output " + std::to_string(c.output_len) + ")";
}

// The default bin sizes up to `hi`: 2^i and 1.5 * 2^i (1, 2, 3, 4, 6, 8, 12, ...), so that
// the smallest bin that holds a load's batch is at most 1.5x that batch.
std::vector<int> DefaultBinSizes(int hi) {
  std::vector<int> out;
  for (int64_t p = 1; p <= hi; p *= 2) {
    out.push_back(static_cast<int>(p));
    if (p >= 2 && p + p / 2 <= hi) out.push_back(static_cast<int>(p + p / 2));
  }
  return out;
}

Status CheckBins(const std::vector<int>& bins, const char* what) {
  if (bins.empty()) return InvalidArgument(std::string(what) + " bins: none");
  for (size_t i = 0; i < bins.size(); ++i) {
    if (bins[i] < 1) return InvalidArgument(std::string(what) + " bins must be >= 1 token");
    if (i > 0 && bins[i] <= bins[i - 1]) return InvalidArgument(std::string(what) + " bins must be ascending and distinct");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::vector<int>> MaximalPatterns(int gpus, const std::vector<int>& degrees) {
  std::vector<std::vector<int>> out;
  const int nd = static_cast<int>(degrees.size());
  std::vector<int> cur(nd, 0);
  // Degrees in the order given; recurse over how many of degree i, the rest with the others.
  std::function<void(int, int)> rec = [&](int i, int left) {
    if (out.size() >= kMaxPatterns) return;
    if (i == nd) {
      for (int d : degrees)
        if (d <= left) return;  // not maximal: another instance would fit
      out.push_back(cur);
      return;
    }
    for (int k = left / degrees[i]; k >= 0; --k) {
      cur[i] = k;
      rec(i + 1, left - k * degrees[i]);
    }
    cur[i] = 0;
  };
  rec(0, gpus);
  return out;
}

std::map<int, int> FallbackLayout(const std::vector<int>& gpus_per_node, const std::vector<int>& degrees) {
  std::map<int, int> out;
  if (degrees.empty()) return out;
  const int d = *std::min_element(degrees.begin(), degrees.end());
  int n = 0;
  for (int g : gpus_per_node) n += g / d;
  if (n > 0) out[d] = n;
  return out;
}

StatusOr<Stage1Problem> MakeStage1Problem(const Stage1Inputs& in) {
  Stage1Problem p;
  if (in.gpus_per_node.empty()) return InvalidArgument("the cluster has no nodes");
  if (static_cast<int>(in.gpus_per_node.size()) > kMaxNodes)
    return InvalidArgument("at most " + std::to_string(kMaxNodes) + " nodes");
  int total = 0;
  for (int g : in.gpus_per_node) {
    if (g < 0 || g > kMaxGpusPerNode)
      return InvalidArgument("GPUs per node must be in [0, " + std::to_string(kMaxGpusPerNode) + "], got " + std::to_string(g));
    total += g;
  }
  if (total == 0) return InvalidArgument("the cluster has no GPUs");
  p.gpus_per_node = in.gpus_per_node;
  if (in.tp_degrees.empty()) return InvalidArgument("no TP degrees");
  p.degrees = in.tp_degrees;
  std::sort(p.degrees.begin(), p.degrees.end());
  for (size_t i = 0; i < p.degrees.size(); ++i) {
    if (p.degrees[i] < 1 || p.degrees[i] > kMaxGpusPerNode)
      return InvalidArgument("TP degree " + std::to_string(p.degrees[i]) + " out of range");
    if (i > 0 && p.degrees[i] == p.degrees[i - 1]) return InvalidArgument("TP degree " + std::to_string(p.degrees[i]) + " listed twice");
  }
  if (in.profile == nullptr) return InvalidArgument("no latency profile");
  for (int d : p.degrees)
    if (!in.profile->HasTp(d)) return InvalidArgument("the latency profile has no TP-" + std::to_string(d) + " curve");
  if (in.thresholds.empty()) return InvalidArgument("no thresholds");
  if (in.thresholds.size() != in.tokens_per_step.size())
    return InvalidArgument("thresholds and tokens_per_step differ in length");
  if (in.block_size < 1 || in.block_size > (1 << 20)) return InvalidArgument("block size must be >= 1");
  for (size_t c = 0; c < in.thresholds.size(); ++c) {
    if (!(in.thresholds[c] > 0 && in.thresholds[c] <= 1)) return InvalidArgument("thresholds must be in (0, 1]");
    if (c > 0 && !(in.thresholds[c] < in.thresholds[c - 1])) return InvalidArgument("thresholds must be strictly descending");
    if (!(in.tokens_per_step[c] >= 1 && in.tokens_per_step[c] <= in.block_size))
      return InvalidArgument("tokens_per_step must be in [1, block size]");
  }
  p.thresholds = in.thresholds;
  p.tokens_per_step = in.tokens_per_step;
  p.block_size = in.block_size;
  if (in.max_context < 2) return InvalidArgument("max_context must be >= 2");
  if (in.token_budget < in.block_size) return InvalidArgument("token budget must be >= the block size");
  if (static_cast<int>(in.classes.size()) > kMaxClasses)
    return InvalidArgument("at most " + std::to_string(kMaxClasses) + " classes");
  for (const LengthClass& c : in.classes) {
    if (c.prompt_len < 1 || c.output_len < 1) return InvalidArgument(ClassName(c) + ": lengths must be >= 1");
    if (c.output_len % in.block_size != 0)
      return InvalidArgument(ClassName(c) + ": output length is not a multiple of the block size " + std::to_string(in.block_size));
    if (int64_t{c.prompt_len} + c.output_len > in.max_context)
      return OutOfRange(ClassName(c) + ": prompt + output = " + std::to_string(int64_t{c.prompt_len} + c.output_len) +
                        " tokens exceeds the context of " + std::to_string(in.max_context));
    if (!(std::isfinite(c.rps) && c.rps >= 0)) return InvalidArgument(ClassName(c) + ": rps must be finite and >= 0");
    if (!(std::isfinite(c.slo_s) && c.slo_s > 0)) return InvalidArgument(ClassName(c) + ": SLO must be > 0 seconds");
    if (c.rps > 0) p.classes.push_back(c);
  }
  // Bins.
  p.recompute_bins = in.recompute_bins;
  p.cache_bins = in.cache_bins;
  p.mixed_batches = in.mixed_batches;
  if (p.mixed_batches) {
    if (!p.cache_bins.empty() && p.cache_bins != p.recompute_bins)
      return InvalidArgument("mixed batches: one bin list (recompute_bins); cache_bins must be empty or the same");
    if (p.recompute_bins.empty()) {
      for (int b : DefaultBinSizes(in.token_budget))
        if (b >= in.block_size && b < in.token_budget) p.recompute_bins.push_back(b);
      p.recompute_bins.push_back(in.token_budget);
    }
    p.cache_bins = p.recompute_bins;
  }
  if (p.recompute_bins.empty() && !p.classes.empty()) {
    // A recompute step costs l_d(max(bin, P+O)), so bins below the shortest class's P+O
    // all cost what that class's own tokens cost: start at the largest size <= it.
    int lo = in.token_budget;
    for (const LengthClass& c : p.classes) lo = std::min(lo, c.prompt_len + c.output_len);
    std::vector<int> bins;
    for (int b : DefaultBinSizes(in.token_budget))
      if (b < in.token_budget) bins.push_back(b);
    while (bins.size() > 1 && bins[1] <= lo) bins.erase(bins.begin());
    bins.push_back(in.token_budget);
    p.recompute_bins = bins;
  }
  if (p.cache_bins.empty())
    for (int b : DefaultBinSizes(std::min(in.token_budget, 32 * in.block_size)))
      if (b >= in.block_size) p.cache_bins.push_back(b);
  if (!p.classes.empty()) {
    RETURN_IF_ERROR(CheckBins(p.recompute_bins, "recompute"));
    RETURN_IF_ERROR(CheckBins(p.cache_bins, "cache"));
    if (p.cache_bins.back() < in.block_size) return InvalidArgument("the largest cache bin is smaller than the block size");
    for (const LengthClass& c : p.classes)
      if (c.prompt_len + c.output_len > p.recompute_bins.back())
        return OutOfRange(ClassName(c) + ": prompt + output = " + std::to_string(c.prompt_len + c.output_len) +
                          " tokens exceeds the largest recompute batch (" + std::to_string(p.recompute_bins.back()) + ")");
  }
  for (int d : p.degrees) {
    std::vector<double> r, c;
    for (int b : p.recompute_bins) r.push_back(in.profile->StepSeconds(d, b));
    for (int b : p.cache_bins) c.push_back(in.profile->StepSeconds(d, b));
    p.rec_lat.push_back(std::move(r));
    p.cache_lat.push_back(std::move(c));
  }
  for (const LengthClass& c : p.classes) {
    const int seq = c.prompt_len + c.output_len;
    std::vector<std::vector<double>> per_d;
    for (size_t d = 0; d < p.degrees.size(); ++d) {
      std::vector<double> r;
      for (size_t b = 0; b < p.recompute_bins.size(); ++b)
        r.push_back(p.recompute_bins[b] >= seq ? p.rec_lat[d][b] : in.profile->StepSeconds(p.degrees[d], seq));
      per_d.push_back(std::move(r));
    }
    p.rec_lat_k.push_back(std::move(per_d));
  }
  return p;
}

namespace {

// Fastest possible run of class k: every step at the highest T_c, on the degree and bins that
// are fastest.
double FastestRun(const Stage1Problem& p, size_t k) {
  const LengthClass& c = p.classes[k];
  const double tmax = *std::max_element(p.tokens_per_step.begin(), p.tokens_per_step.end());
  const double blocks = c.output_len / p.block_size;
  const double cache_steps = std::max(0.0, c.output_len / tmax - blocks);
  double best = kInf;
  for (size_t d = 0; d < p.degrees.size(); ++d) {
    double rec = kInf, cache = kInf;
    for (size_t b = 0; b < p.recompute_bins.size(); ++b) rec = std::min(rec, p.rec_lat_k[k][d][b]);
    for (size_t b = 0; b < p.cache_bins.size(); ++b)
      if (p.cache_bins[b] >= p.block_size) cache = std::min(cache, p.cache_lat[d][b]);
    best = std::min(best, blocks * rec + cache_steps * cache);
  }
  return best;
}

struct Stage1Mip {
  MipModel m;
  std::vector<std::vector<int>> y;  // [group][pattern]
  std::vector<int> X;               // [d]
  std::vector<std::vector<int>> z, zc;         // [d][b]
  std::vector<std::vector<int>> t;             // [k][c]: steps at threshold c (recompute + cache)
  std::vector<std::vector<std::vector<int>>> w, wc;  // [k][d][b] (-1: not allowed)
  std::vector<std::pair<int, double>> obj1, obj2, obj3;
};

Stage1Mip BuildMip(const Stage1Problem& p, bool use_all_gpus, const std::optional<std::map<int, int>>& fixed) {
  Stage1Mip s;
  MipModel& m = s.m;
  const int nd = static_cast<int>(p.degrees.size());
  const int nk = static_cast<int>(p.classes.size());
  const int nc = static_cast<int>(p.thresholds.size());
  const int B = p.block_size;
  int total_gpus = 0;
  std::map<int, int> groups;  // GPUs per node -> nodes
  for (int g : p.gpus_per_node) {
    total_gpus += g;
    ++groups[g];
  }
  // Node packing through patterns.
  std::vector<std::vector<std::pair<int, double>>> cap_terms(nd);
  for (const auto& [gpus, count] : groups) {
    const std::vector<std::vector<int>> pats = MaximalPatterns(gpus, p.degrees);
    std::vector<std::pair<int, double>> sum;
    std::vector<int> ys;
    for (size_t q = 0; q < pats.size(); ++q) {
      const int col = m.AddCol("y_" + std::to_string(gpus) + "_" + std::to_string(q), 0, count, true);
      ys.push_back(col);
      sum.emplace_back(col, 1.0);
      for (int d = 0; d < nd; ++d)
        if (pats[q][d] > 0) cap_terms[d].emplace_back(col, -static_cast<double>(pats[q][d]));
    }
    s.y.push_back(ys);
    m.AddRow("nodes_" + std::to_string(gpus), -kInf, count, sum);
  }
  for (int d = 0; d < nd; ++d) {
    int lo = 0, hi = total_gpus / p.degrees[d];
    if (fixed) {
      auto it = fixed->find(p.degrees[d]);
      lo = hi = it == fixed->end() ? 0 : it->second;
    }
    const int xd = m.AddCol("X_" + std::to_string(p.degrees[d]), lo, hi, true);
    s.X.push_back(xd);
    std::vector<std::pair<int, double>> t = cap_terms[d];
    t.emplace_back(xd, 1.0);
    m.AddRow("pack_" + std::to_string(p.degrees[d]), -kInf, 0, t);
    const double M = use_all_gpus ? total_gpus + 1.0 : 0.0;
    s.obj3.emplace_back(xd, 1.0 - M * p.degrees[d]);
  }
  // Bins. A bin is dominated when a larger one of the same degree is no slower: the larger
  // bin admits every class the smaller one does, with no more latency per step and less
  // work per token, so an optimum never needs the smaller one (it is left out: fewer binaries).
  auto dominated = [](const std::vector<double>& lat, size_t b) {
    for (size_t b2 = b + 1; b2 < lat.size(); ++b2)
      if (lat[b2] <= lat[b]) return true;
    return false;
  };
  for (int d = 0; d < nd; ++d) {
    std::vector<int> zr, zcr;
    std::vector<std::pair<int, double>> one, onec;
    for (size_t b = 0; b < p.recompute_bins.size(); ++b) {
      if (dominated(p.rec_lat[d], b)) {
        zr.push_back(-1);
        continue;
      }
      zr.push_back(m.AddCol("z_" + std::to_string(p.degrees[d]) + "_" + std::to_string(p.recompute_bins[b]), 0, 1, true));
      one.emplace_back(zr.back(), 1.0);
    }
    for (size_t b = 0; b < p.cache_bins.size(); ++b) {
      if (dominated(p.cache_lat[d], b)) {
        zcr.push_back(-1);
        continue;
      }
      zcr.push_back(m.AddCol("zc_" + std::to_string(p.degrees[d]) + "_" + std::to_string(p.cache_bins[b]), 0, 1, true));
      onec.emplace_back(zcr.back(), 1.0);
    }
    m.AddRow("onebin_" + std::to_string(p.degrees[d]), 1, 1, one);
    m.AddRow("onecbin_" + std::to_string(p.degrees[d]), 1, 1, onec);
    if (p.mixed_batches)  // one batch: the same bin for both (same list, same dominated bins)
      for (size_t b = 0; b < zr.size(); ++b)
        if (zr[b] >= 0 && zcr[b] >= 0) m.AddRow("mixed_" + std::to_string(p.degrees[d]) + "_" + std::to_string(b), 0, 0, {{zr[b], 1.0}, {zcr[b], -1.0}});
    s.z.push_back(zr);
    s.zc.push_back(zcr);
  }
  double rps_sum = 0, token_sum = 0;
  for (const LengthClass& c : p.classes) {
    rps_sum += c.rps;
    token_sum += c.rps * c.output_len;
  }
  const double tmin = *std::min_element(p.tokens_per_step.begin(), p.tokens_per_step.end());
  std::vector<std::vector<std::pair<int, double>>> stab(nd);
  s.t.resize(nk);
  s.w.resize(nk);
  s.wc.resize(nk);
  for (int k = 0; k < nk; ++k) {
    const LengthClass& c = p.classes[k];
    const std::string ks = std::to_string(k);
    const double blocks = c.output_len / B;
    const double cache_ub = std::max(0.0, c.output_len / tmin - blocks);
    const int seq = c.prompt_len + c.output_len;
    // Steps by threshold, recompute and cache together: t_{k,c} = s_{k,c} + s'_{k,c}. Exact:
    // recompute and cache steps at one threshold unmask the same T_c tokens and weigh the
    // same in the first objective, and any t with sum_c t_{k,c} >= N_k (implied: cache steps
    // are >= 0) splits into s <= t with sum_c s = N_k (ClassPlan reports such a split).
    std::vector<std::pair<int, double>> tokens, cache_c;
    for (int ci = 0; ci < nc; ++ci) {
      const int a = m.AddCol("t_" + ks + "_" + std::to_string(ci), 0, blocks + cache_ub, false);
      s.t[k].push_back(a);
      cache_c.emplace_back(a, -1.0);
      tokens.emplace_back(a, p.tokens_per_step[ci]);
      s.obj1.emplace_back(a, c.rps * p.thresholds[ci] * p.tokens_per_step[ci] / token_sum);
    }
    m.AddRow("tokens_" + ks, c.output_len, c.output_len, tokens);
    std::vector<std::pair<int, double>> rec_d, slo;
    s.w[k].assign(nd, {});
    s.wc[k].assign(nd, {});
    for (int d = 0; d < nd; ++d) {
      const std::string ds = std::to_string(p.degrees[d]);
      for (size_t b = 0; b < p.recompute_bins.size(); ++b) {
        if (s.z[d][b] < 0) {
          s.w[k][d].push_back(-1);
          continue;
        }
        const int col = m.AddCol("w_" + ks + "_" + ds + "_" + std::to_string(b), 0, blocks, false);
        s.w[k][d].push_back(col);
        rec_d.emplace_back(col, 1.0);
        // The step runs in a batch of the bin's tokens, or of the class's own if it is longer.
        const double L = p.rec_lat_k[k][d][b];
        slo.emplace_back(col, L);
        s.obj2.emplace_back(col, c.rps * L / rps_sum);
        stab[d].emplace_back(col, c.rps * seq * L / std::max(p.recompute_bins[b], seq));
        m.AddRow("link_" + ks + "_" + ds + "_" + std::to_string(b), -kInf, 0, {{col, 1.0}, {s.z[d][b], -blocks}});
      }
      for (size_t b = 0; b < p.cache_bins.size(); ++b) {
        if (p.cache_bins[b] < B || s.zc[d][b] < 0) {
          s.wc[k][d].push_back(-1);
          continue;
        }
        const int col = m.AddCol("wc_" + ks + "_" + ds + "_" + std::to_string(b), 0, cache_ub, false);
        s.wc[k][d].push_back(col);
        cache_c.emplace_back(col, 1.0);
        const double L = p.cache_lat[d][b];
        slo.emplace_back(col, L);
        s.obj2.emplace_back(col, c.rps * L / rps_sum);
        stab[d].emplace_back(col, c.rps * B * L / p.cache_bins[b]);
        m.AddRow("linkc_" + ks + "_" + ds + "_" + std::to_string(b), -kInf, 0, {{col, 1.0}, {s.zc[d][b], -cache_ub}});
      }
    }
    m.AddRow("recsplit_" + ks, blocks, blocks, rec_d);
    // cache steps on the degrees = steps at the thresholds - the N_k recompute steps
    m.AddRow("cachesplit_" + ks, -blocks, -blocks, cache_c);
    m.AddRow("slo_" + ks, -kInf, c.slo_s, slo);
  }
  for (int d = 0; d < nd; ++d) {
    std::vector<std::pair<int, double>> t = stab[d];
    t.emplace_back(s.X[d], -1.0);
    m.AddRow("stable_" + std::to_string(p.degrees[d]), -kInf, 0, t);
  }
  return s;
}

void SetObjective(MipModel& m, const std::vector<std::pair<int, double>>& obj, bool maximize) {
  for (auto& c : m.cols) c.obj = 0;
  for (const auto& [j, a] : obj) m.cols[j].obj += a;
  m.maximize = maximize;
}

double Eval(const std::vector<std::pair<int, double>>& obj, const std::vector<double>& x) {
  double v = 0;
  for (const auto& [j, a] : obj) v += a * x[j];
  return v;
}

// The objective rows fixed at their optimum use the merged coefficients (a column may appear
// in several terms).
std::vector<std::pair<int, double>> Merge(const std::vector<std::pair<int, double>>& t) {
  std::map<int, double> m;
  for (const auto& [j, a] : t) m[j] += a;
  return {m.begin(), m.end()};
}

}  // namespace

StatusOr<Stage1Result> PlanStage1(const Stage1Inputs& inputs, const Stage1Options& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!(options.tolerance >= 0 && options.tolerance < 1)) return InvalidArgument("tolerance must be in [0, 1)");
  ASSIGN_OR_RETURN(Stage1Problem p, MakeStage1Problem(inputs));
  Stage1Result r;
  auto finish = [&](Stage1Result& res) {
    res.total_instances = 0;
    res.gpus_used = 0;
    for (const auto& [d, n] : res.instances) {
      res.total_instances += n;
      res.gpus_used += d * n;
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto fallback = [&](const std::string& why) {
    r.outcome = Stage1Outcome::kInfeasibleFallback;
    r.reason = why;
    r.instances = options.fixed_instances ? *options.fixed_instances : FallbackLayout(p.gpus_per_node, p.degrees);
    r.recompute_bin.clear();
    r.cache_bin.clear();
    r.classes.clear();
    finish(r);
    return r;
  };
  if (p.classes.empty()) {
    r.outcome = Stage1Outcome::kEmptyWorkload;
    r.reason = "no class has arrivals: nothing to plan";
    finish(r);
    return r;
  }
  for (size_t k = 0; k < p.classes.size(); ++k) {
    const LengthClass& c = p.classes[k];
    const double fastest = FastestRun(p, k);
    if (fastest > c.slo_s)
      return fallback(ClassName(c) + ": its SLO of " + std::to_string(c.slo_s) + " s is shorter than its fastest possible run (" +
                      std::to_string(fastest) + " s)");
  }
  if (options.fixed_instances) {
    for (const auto& [d, n] : *options.fixed_instances) {
      if (n < 0) return InvalidArgument("fixed layout: negative count");
      if (n > 0 && std::find(p.degrees.begin(), p.degrees.end(), d) == p.degrees.end())
        return InvalidArgument("fixed layout: TP-" + std::to_string(d) + " is not a candidate degree");
    }
  }
  Stage1Mip s = BuildMip(p, options.use_all_gpus, options.fixed_instances);
  const struct {
    const char* name;
    const std::vector<std::pair<int, double>>* obj;
    bool maximize;
  } stages[3] = {{"max mean threshold", &s.obj1, true}, {"min mean latency", &s.obj2, false}, {"fewest instances", &s.obj3, false}};
  std::vector<double> x;
  for (int i = 0; i < 3; ++i) {
    SetObjective(s.m, *stages[i].obj, stages[i].maximize);
    MipOptions mo = options.mip;
    // Warm start: the second objective's optimum is feasible for the third (its rows are
    // still there, the second one fixed within the tolerance it satisfies). Without that
    // incumbent GLPK spent most of the third solve looking for a first integer point in the
    // thin set the two fixed objectives leave (plan_bench, docs/experiments.md). The first
    // two solves keep GLPK's presolver, which a warm start turns off and which pays there.
    if (i == 2) mo.initial = x;
    ASSIGN_OR_RETURN(MipResult res, SolveMip(s.m, mo));
    r.solves.push_back({stages[i].name, res.status, res.detail, res.objective, res.seconds, res.nodes});
    if (!res.has_solution()) {
      if (i == 0) {
        return fallback(std::string("no layout meets every SLO with a stable load (") + MipStatusName(res.status) + ", " +
                        res.detail + ")");
      }
      // A later objective found nothing within its limits: keep the previous solution.
      break;
    }
    if (res.status == MipStatus::kFeasible) r.limited = true;
    x = res.x;
    if (i < 2) {
      const double v = res.objective;
      const double slack = options.tolerance * std::max(1.0, std::abs(v)) + 1e-9;
      if (stages[i].maximize)
        s.m.AddRow(std::string("fix_") + stages[i].name, v - slack, kInf, Merge(*stages[i].obj));
      else
        s.m.AddRow(std::string("fix_") + stages[i].name, -kInf, v + slack, Merge(*stages[i].obj));
    }
  }
  // Read the layout.
  r.outcome = Stage1Outcome::kPlanned;
  const int nd = static_cast<int>(p.degrees.size());
  for (int d = 0; d < nd; ++d) {
    const int n = static_cast<int>(std::lround(x[s.X[d]]));
    if (n <= 0) continue;
    r.instances[p.degrees[d]] = n;
    for (size_t b = 0; b < p.recompute_bins.size(); ++b)
      if (s.z[d][b] >= 0 && x[s.z[d][b]] > 0.5) r.recompute_bin[p.degrees[d]] = p.recompute_bins[b];
    for (size_t b = 0; b < p.cache_bins.size(); ++b)
      if (s.zc[d][b] >= 0 && x[s.zc[d][b]] > 0.5) r.cache_bin[p.degrees[d]] = p.cache_bins[b];
  }
  double rps_sum = 0;
  for (size_t k = 0; k < p.classes.size(); ++k) {
    ClassPlan cp;
    cp.cls = p.classes[k];
    // Split the steps at each threshold into recompute and cache steps: the N_k recompute
    // steps go to the highest thresholds first (any split is as good; this one is fixed).
    double rec_left = p.classes[k].output_len / p.block_size;
    for (size_t c = 0; c < p.thresholds.size(); ++c) {
      const double steps = std::max(0.0, x[s.t[k][c]]);
      const double rec = std::min(steps, rec_left);
      rec_left -= rec;
      cp.recompute_at.push_back(rec);
      cp.cache_at.push_back(steps - rec);
    }
    for (int d = 0; d < nd; ++d) {
      double rec = 0, cache = 0;
      for (size_t b = 0; b < p.recompute_bins.size(); ++b)
        if (s.w[k][d][b] >= 0) {
          rec += x[s.w[k][d][b]];
          cp.latency_s += x[s.w[k][d][b]] * p.rec_lat_k[k][d][b];
        }
      for (size_t b = 0; b < p.cache_bins.size(); ++b)
        if (s.wc[k][d][b] >= 0) {
          cache += x[s.wc[k][d][b]];
          cp.latency_s += x[s.wc[k][d][b]] * p.cache_lat[d][b];
        }
      if (rec > 1e-9) cp.recompute_on[p.degrees[d]] = rec;
      if (cache > 1e-9) cp.cache_on[p.degrees[d]] = cache;
    }
    r.mean_latency_s += cp.cls.rps * cp.latency_s;
    rps_sum += cp.cls.rps;
    r.classes.push_back(std::move(cp));
  }
  r.mean_latency_s /= rps_sum;
  r.mean_threshold = Eval(s.obj1, x);
  finish(r);
  return r;
}

}  // namespace tediserve::plan
