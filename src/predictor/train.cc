#include "predictor/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <unordered_map>

namespace tediserve::predictor {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<float> Matrix(const std::vector<const StepLogRow*>& rows, policy::FeatureSet set) {
  const size_t nf = static_cast<size_t>(policy::NumFeatures(set));
  std::vector<float> x(rows.size() * nf);
  for (size_t i = 0; i < rows.size(); ++i)
    policy::StepFeatures(rows[i]->state, rows[i]->threshold, set, std::span<float>(x.data() + i * nf, nf));
  return x;
}

StatusOr<std::vector<double>> PredictSteps(const StepPredictor& p, const std::vector<const StepLogRow*>& rows) {
  const std::vector<float> x = Matrix(rows, p.feature_set());
  std::vector<float> raw(rows.size());
  RETURN_IF_ERROR(p.PredictRows(x, raw));
  std::vector<double> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    out[i] = std::max<double>(raw[i] * rows[i]->state.spec.output_len, rows[i]->state.MinRemainingSteps());
  return out;
}

double Ape(double pred, int truth) { return std::abs(pred - truth) / truth; }

}  // namespace

StatusOr<Trained> TrainPredictors(const std::vector<StepLogRow>& rows, const TrainOptions& o) {
  if (!(o.heldout_fraction > 0 && o.heldout_fraction < 1)) return InvalidArgument("held-out fraction must be in (0, 1)");
  // Split by problem.
  std::set<int64_t> problems;
  for (const auto& r : rows) problems.insert(r.problem);
  if (problems.size() < 2) return InvalidArgument("step log: need rows of at least 2 problems for a held-out split");
  std::set<int64_t> held;
  for (int64_t p : problems)
    if (static_cast<double>(Mix(static_cast<uint64_t>(p) ^ Mix(o.seed)) % 1000000) < o.heldout_fraction * 1e6) held.insert(p);
  if (held.empty()) held.insert(*problems.begin());
  if (held.size() == problems.size()) held.erase(held.begin());

  std::vector<const StepLogRow*> train, test;
  for (const auto& r : rows) (held.count(r.problem) ? test : train).push_back(&r);
  TrainReport rep;
  rep.train_rows = static_cast<int>(train.size());
  rep.heldout_rows = static_cast<int>(test.size());
  rep.heldout_problems = static_cast<int>(held.size());
  rep.train_problems = static_cast<int>(problems.size() - held.size());

  // One-shot baseline: T_c = output tokens / steps over the training requests at c.
  std::map<double, std::pair<double, double>> sums;  // c -> (tokens, steps)
  for (const StepLogRow* r : train) {
    if (r->state.steps != 0) continue;
    auto& s = sums[r->threshold];
    s.first += r->state.spec.output_len;
    s.second += r->remaining;
  }
  if (sums.empty()) return InvalidArgument("step log: no request starts (rows with steps 0) in the training split");
  std::vector<double> cs, tps;
  for (auto it = sums.rbegin(); it != sums.rend(); ++it) {
    cs.push_back(it->first);
    tps.push_back(it->second.first / it->second.second);
    rep.tokens_per_step[it->first] = tps.back();
  }
  policy::OneShotEstimator oneshot(cs, tps);

  // The two models.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> y(train.size());
  for (size_t i = 0; i < train.size(); ++i) y[i] = static_cast<float>(train[i]->remaining) / train[i]->state.spec.output_len;
  auto fit = [&](policy::FeatureSet set) -> StatusOr<StepPredictor> {
    ASSIGN_OR_RETURN(Gbm g, Gbm::Train(Matrix(train, set), y, policy::NumFeatures(set), o.gbm));
    return StepPredictor::FromGbm(std::move(g), set);
  };
  ASSIGN_OR_RETURN(StepPredictor full, fit(policy::FeatureSet::kFull));
  ASSIGN_OR_RETURN(StepPredictor progress, fit(policy::FeatureSet::kProgress));
  rep.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Held-out error with a fresh prediction at every step.
  ASSIGN_OR_RETURN(std::vector<double> pf, PredictSteps(full, test));
  ASSIGN_OR_RETURN(std::vector<double> pp, PredictSteps(progress, test));
  std::map<double, std::array<double, 4>> by;  // c -> sums of APE (3) and count
  double so = 0, sp = 0, sf = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    const StepLogRow& r = *test[i];
    const double c[] = {r.threshold};
    double one = 0;
    oneshot.Predict(r.state, c, std::span<double>(&one, 1));
    one = std::max<double>(one, r.state.MinRemainingSteps());
    const double e[3] = {Ape(one, r.remaining), Ape(pp[i], r.remaining), Ape(pf[i], r.remaining)};
    so += e[0];
    sp += e[1];
    sf += e[2];
    auto& b = by[r.threshold];
    for (int k = 0; k < 3; ++k) b[k] += e[k];
    b[3] += 1;
  }
  const double n = std::max<size_t>(1, test.size());
  rep.mape_oneshot = so / n;
  rep.mape_progress = sp / n;
  rep.mape_full = sf / n;
  for (const auto& [c, b] : by) rep.mape_by_threshold[c] = {b[0] / b[3], b[1] / b[3], b[2] / b[3]};

  // Refresh granularity: predictions refreshed after k newly unmasked tokens (k = 0: at block
  // starts), decremented by one per step in between, as the scheduler does.
  std::unordered_map<policy::RequestId, std::vector<size_t>> by_request;
  for (size_t i = 0; i < test.size(); ++i) by_request[test[i]->state.spec.id].push_back(i);
  for (auto& [id, idx] : by_request)
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return test[a]->state.steps < test[b]->state.steps; });
  // The cost of one refresh (one request, every threshold), measured on the held-out states.
  {
    std::vector<double> th(sums.size());
    size_t j = 0;
    for (auto it = sums.rbegin(); it != sums.rend(); ++it) th[j++] = it->first;
    std::vector<const policy::RequestState*> states;
    for (const StepLogRow* r : test) states.push_back(&r->state);
    std::vector<double> out(states.size() * th.size());
    const auto t1 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(full.Predict(states, th, out));
    rep.refresh_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() /
                     std::max<size_t>(1, states.size());
  }
  std::vector<int> ks = o.refresh_candidates;
  ks.push_back(0);
  for (int k : ks) {
    double err = 0, refreshes = 0;
    for (const auto& [id, idx] : by_request) {
      double pred = 0;
      int since = 0;
      for (size_t j = 0; j < idx.size(); ++j) {
        const StepLogRow& r = *test[idx[j]];
        if (j > 0) since += r.state.unmasked - test[idx[j - 1]]->state.unmasked;
        const bool refresh = j == 0 || (k > 0 ? since >= k : r.state.steps_in_block == 0);
        if (refresh) {
          pred = pf[idx[j]];
          since = 0;
          refreshes += 1;
        } else {
          pred = std::max<double>(pred - 1, r.state.MinRemainingSteps());
        }
        err += Ape(pred, r.remaining);
      }
    }
    const double per_request = refreshes / std::max<size_t>(1, by_request.size());
    rep.refresh.push_back({k, err / n, per_request, per_request * rep.refresh_us});
  }
  const double base = rep.refresh.front().mape;  // k = refresh_candidates[0] (1)
  rep.chosen_refresh_tokens = rep.refresh.front().k;
  for (const RefreshPoint& p : rep.refresh)
    if (p.k > rep.chosen_refresh_tokens && p.mape <= base * (1 + o.refresh_tolerance)) rep.chosen_refresh_tokens = p.k;
  RETURN_IF_ERROR(full.set_refresh_tokens(rep.chosen_refresh_tokens));
  RETURN_IF_ERROR(progress.set_refresh_tokens(rep.chosen_refresh_tokens));
  return Trained{std::move(full), std::move(progress), rep};
}

std::string FormatReport(const TrainReport& r) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "rows: %d train (%d problems), %d held out (%d problems); trained in %.2f s\n",
                r.train_rows, r.train_problems, r.heldout_rows, r.heldout_problems, r.train_seconds);
  s += buf;
  s += "one-shot T_c (training split):";
  for (auto it = r.tokens_per_step.rbegin(); it != r.tokens_per_step.rend(); ++it) {
    std::snprintf(buf, sizeof buf, " %.2f -> %.2f;", it->first, it->second);
    s += buf;
  }
  s += "\n\nMAPE of remaining steps on held-out rows (prediction refreshed every step):\n";
  s += "| threshold | one-shot | progress features | full (progress + confidence) |\n|---|---|---|---|\n";
  for (auto it = r.mape_by_threshold.rbegin(); it != r.mape_by_threshold.rend(); ++it) {
    std::snprintf(buf, sizeof buf, "| %.2f | %.1f%% | %.1f%% | %.1f%% |\n", it->first, 100 * it->second[0],
                  100 * it->second[1], 100 * it->second[2]);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "| all | %.1f%% | %.1f%% (%+.1f%%) | %.1f%% (%+.1f%%) |\n", 100 * r.mape_oneshot,
                100 * r.mape_progress, 100 * (r.mape_progress / r.mape_oneshot - 1), 100 * r.mape_full,
                100 * (r.mape_full / r.mape_oneshot - 1));
  s += buf;
  s += "\nrefresh granularity (full model; k tokens between refreshes, block = at block starts):\n";
  std::snprintf(buf, sizeof buf, "(one refresh of one request, all thresholds: %.2f us measured)\n", r.refresh_us);
  s += buf;
  s += "| k | MAPE | refreshes per request | predictor time per request (us) |\n|---|---|---|---|\n";
  for (const RefreshPoint& p : r.refresh) {
    std::snprintf(buf, sizeof buf, "| %s | %.1f%% | %.1f | %.1f |\n", p.k == 0 ? "block" : std::to_string(p.k).c_str(),
                  100 * p.mape, p.refreshes_per_request, p.predict_us_per_request);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "chosen k = %d (the largest within 5%% of k = 1)\n", r.chosen_refresh_tokens);
  s += buf;
  return s;
}

}  // namespace tediserve::predictor
