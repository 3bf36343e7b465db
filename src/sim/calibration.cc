#include "sim/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "common/input.h"
#include <numeric>
#include <set>
#include <sstream>

namespace tediserve::sim {

namespace {

using nlohmann::json;

std::string Num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Interpolates ys over descending xs, clamped outside.
double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty() || xs.size() != ys.size()) return 0;
  if (x >= xs.front()) return ys.front();
  if (x <= xs.back()) return ys.back();
  for (size_t i = 0; i + 1 < xs.size(); ++i)
    if (x <= xs[i] && x >= xs[i + 1]) {
      const double span = xs[i] - xs[i + 1];
      const double f = span > 0 ? (xs[i] - x) / span : 0;
      return ys[i] + f * (ys[i + 1] - ys[i]);
    }
  return ys.back();
}

// Bounds that follow from the models calibrated: LLaDA/Dream decode blocks of 4 to 64 tokens
// and outputs of up to a few thousand; the fit holds requests x output floats in memory.
constexpr int kMaxCalibrationBlock = 1024;
constexpr int kMaxCalibrationOutput = 8192;

// The checks calibrations and fit targets share. `where` prefixes messages.
Status ValidateCurves(const std::string& where, int block_size, const std::vector<double>& th,
                      const std::vector<double>& tps, const std::vector<double>& acc, double steps_cv,
                      int cv_output_len) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return InvalidArgument(where + "field \"" + field + "\": " + why);
  };
  if (block_size <= 0 || block_size > kMaxCalibrationBlock)
    return bad("block_size", "must be in [1, " + std::to_string(kMaxCalibrationBlock) + "], got " +
                                 std::to_string(block_size));
  if (th.empty() || th.size() > 64) return bad("thresholds", "must list 1 to 64 thresholds");
  for (size_t i = 0; i < th.size(); ++i) {
    if (!(th[i] > 0 && th[i] <= 1)) return bad("thresholds", "must be in (0, 1], got " + Num(th[i]));
    if (i > 0 && !(th[i] < th[i - 1]))
      return bad("thresholds", "must be strictly descending, got " + Num(th[i - 1]) + " then " + Num(th[i]));
  }
  if (tps.size() != th.size())
    return bad("tokens_per_step", "has " + std::to_string(tps.size()) + " values for " +
                                      std::to_string(th.size()) + " thresholds");
  for (size_t i = 0; i < tps.size(); ++i) {
    if (!(tps[i] >= 1 && tps[i] <= block_size))
      return bad("tokens_per_step", "must be in [1, block_size = " + std::to_string(block_size) + "], got " +
                                        Num(tps[i]));
    if (i > 0 && tps[i] < tps[i - 1])
      return bad("tokens_per_step", "must not fall as the threshold falls: " + Num(tps[i - 1]) + " at " +
                                        Num(th[i - 1]) + ", " + Num(tps[i]) + " at " + Num(th[i]));
  }
  if (acc.size() != th.size())
    return bad("accuracy", "has " + std::to_string(acc.size()) + " values for " + std::to_string(th.size()) +
                               " thresholds");
  for (double a : acc)
    if (!(a >= 0 && a <= 1)) return bad("accuracy", "must be in [0, 1], got " + Num(a));
  if (!(steps_cv >= 0 && std::isfinite(steps_cv))) return bad("steps_cv", "must be >= 0, got " + Num(steps_cv));
  if (cv_output_len <= 0 || cv_output_len > kMaxCalibrationOutput || cv_output_len % block_size != 0)
    return bad("cv_output_len", "must be a positive multiple of block_size " + std::to_string(block_size) +
                                    " and at most " + std::to_string(kMaxCalibrationOutput) + ", got " +
                                    std::to_string(cv_output_len));
  return Status::Ok();
}

// ---- JSON field readers: each names the field and the file ----

Status Missing(const std::string& where, const std::string& field) {
  return InvalidArgument(where + "missing field \"" + field + "\"");
}

Status ReadNumber(const json& j, const std::string& where, const std::string& field, double* out) {
  if (!j.contains(field)) return Missing(where, field);
  if (!j[field].is_number()) return InvalidArgument(where + "field \"" + field + "\": must be a number");
  *out = j[field].get<double>();
  if (!std::isfinite(*out)) return InvalidArgument(where + "field \"" + field + "\": must be finite");
  return Status::Ok();
}

Status ReadInt(const json& j, const std::string& where, const std::string& field, int* out) {
  if (!j.contains(field)) return Missing(where, field);
  if (!j[field].is_number_integer()) return InvalidArgument(where + "field \"" + field + "\": must be an integer");
  const int64_t v = j[field].get<int64_t>();
  if (v < -(int64_t{1} << 30) || v > (int64_t{1} << 30))
    return InvalidArgument(where + "field \"" + field + "\": out of range");
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status ReadNumbers(const json& j, const std::string& where, const std::string& field, std::vector<double>* out) {
  if (!j.contains(field)) return Missing(where, field);
  if (!j[field].is_array()) return InvalidArgument(where + "field \"" + field + "\": must be an array of numbers");
  out->clear();
  for (const json& v : j[field]) {
    if (!v.is_number()) return InvalidArgument(where + "field \"" + field + "\": must be an array of numbers");
    out->push_back(v.get<double>());
  }
  return Status::Ok();
}

Status ReadString(const json& j, const std::string& where, const std::string& field, std::string* out) {
  if (!j.contains(field)) return Missing(where, field);
  if (!j[field].is_string()) return InvalidArgument(where + "field \"" + field + "\": must be a string");
  *out = j[field].get<std::string>();
  return Status::Ok();  // nlohmann's parser has already refused invalid UTF-8
}

Status ParamsFromJson(const json& j, const std::string& where, DenoiserParams* p) {
  if (!j.is_object()) return InvalidArgument(where + "field \"params\": must be an object");
  const std::string w = where + "params.";
  const std::pair<const char*, double*> fields[] = {{"mu", &p->mu},       {"sigma", &p->sigma},
                                                    {"sigma_request", &p->sigma_request},
                                                    {"sigma_block", &p->sigma_block},
                                                    {"delta", &p->delta}, {"eta", &p->eta}};
  for (const auto& [name, dst] : fields) RETURN_IF_ERROR(ReadNumber(j, w, name, dst));
  for (const auto& [key, _] : j.items()) {
    bool known = false;
    for (const auto& [name, dst] : fields) known |= key == name;
    if (!known) return InvalidArgument(w + "unknown field \"" + key + "\"");
  }
  const Status s = ValidateParams(*p);
  if (!s.ok()) return InvalidArgument(where + s.message());
  return Status::Ok();
}

// ---- The fit ----

// A fixed sample of blocks in standard units: sorted token draws per block, a jitter per
// block, and request effects at stratified normal quantiles (less noise than random ones).
struct FitSample {
  int block_size = 0;
  int blocks_per_request = 0;
  int requests = 0;
  std::vector<float> eps;    // requests * blocks_per_request * block_size, descending per block
  std::vector<double> xi;    // per block
  std::vector<double> eta;   // per request
};

double InverseNormal(double p) {  // bisection on Phi; only used to build the sample
  double lo = -10, hi = 10;
  for (int it = 0; it < 100; ++it) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

FitSample MakeSample(int block_size, int blocks_per_request) {
  constexpr int kSampleBlocks = 4096;
  constexpr uint64_t kFitSeed = 0x7ED15E5Eull;
  FitSample s;
  s.block_size = block_size;
  s.blocks_per_request = blocks_per_request;
  s.requests = std::max(512, (kSampleBlocks + blocks_per_request - 1) / blocks_per_request);
  const size_t blocks = static_cast<size_t>(s.requests) * blocks_per_request;
  s.eps.resize(blocks * block_size);
  s.xi.resize(blocks);
  s.eta.resize(s.requests);
  for (int r = 0; r < s.requests; ++r) s.eta[r] = InverseNormal((r + 0.5) / s.requests);
  for (size_t b = 0; b < blocks; ++b) {
    const uint64_t key = HashCombine(kFitSeed, b);
    std::span<float> e(s.eps.data() + b * block_size, block_size);
    StandardNormals(key, e);
    std::sort(e.begin(), e.end(), std::greater<float>());
    s.xi[b] = StandardNormal(HashCombine(key, ~0ull));
  }
  return s;
}

struct SampleStats {
  std::vector<double> tokens_per_step;
  double steps_cv = 0;
};

// The same step rule as AdvanceBlock, written on standard draws: z >= cut  <=>
// eps >= (cut - shift) / sigma.
SampleStats Simulate(const FitSample& s, const DenoiserParams& p, const std::vector<double>& thresholds) {
  SampleStats out;
  const int B = s.block_size;
  const double inv_sigma = 1.0 / p.sigma;
  std::vector<double> per_request(s.requests);
  for (size_t t = 0; t < thresholds.size(); ++t) {
    const double L = ThresholdLogit(thresholds[t]);
    int64_t steps_all = 0;
    for (int r = 0; r < s.requests; ++r) {
      int64_t steps_r = 0;
      const double base = p.mu + p.sigma_request * s.eta[r];
      for (int k = 0; k < s.blocks_per_request; ++k) {
        const size_t b = static_cast<size_t>(r) * s.blocks_per_request + k;
        const float* e = s.eps.data() + b * B;
        const double shift = base + p.sigma_block * s.xi[b];
        int pos = 0;
        double drift = 0;
        while (pos < B) {
          const double cut = (L - drift - shift) * inv_sigma;
          int end = pos;
          while (end < B && e[end] >= cut) ++end;
          if (end == pos) ++end;
          drift += p.delta + p.eta * (end - pos) / B;
          pos = end;
          ++steps_r;
        }
      }
      steps_all += steps_r;
      if (t == 0) per_request[r] = static_cast<double>(steps_r);
    }
    out.tokens_per_step.push_back(static_cast<double>(s.requests) * s.blocks_per_request * B / steps_all);
  }
  const double mean = std::accumulate(per_request.begin(), per_request.end(), 0.0) / s.requests;
  double var = 0;
  for (double v : per_request) var += (v - mean) * (v - mean);
  out.steps_cv = std::sqrt(var / s.requests) / mean;
  return out;
}

// The search space: x = (mu, log sigma, delta, eta, sigma_request); |.| keeps the last three
// non-negative without bounds.
DenoiserParams FromVector(const std::array<double, 5>& x, double sigma_block) {
  DenoiserParams p;
  p.mu = x[0];
  p.sigma = std::exp(std::clamp(x[1], -5.0, 5.0));
  p.delta = std::abs(x[2]);
  p.eta = std::abs(x[3]);
  p.sigma_request = std::abs(x[4]);
  p.sigma_block = sigma_block;
  return p;
}

// Plain Nelder-Mead (reflection 1, expansion 2, contraction 0.5, shrink 0.5).
template <size_t N>
std::array<double, N> NelderMead(const std::function<double(const std::array<double, N>&)>& f,
                                 std::array<double, N> x0, const std::array<double, N>& step, int max_evals,
                                 double* best_value) {
  using P = std::array<double, N>;
  std::array<P, N + 1> pts;
  std::array<double, N + 1> val;
  pts[0] = x0;
  for (size_t i = 0; i < N; ++i) {
    pts[i + 1] = x0;
    pts[i + 1][i] += step[i];
  }
  int evals = 0;
  for (size_t i = 0; i <= N; ++i) val[i] = f(pts[i]), ++evals;
  auto lerp = [](const P& a, const P& b, double t) {  // a + t (b - a)
    P r;
    for (size_t i = 0; i < N; ++i) r[i] = a[i] + t * (b[i] - a[i]);
    return r;
  };
  while (evals < max_evals) {
    std::array<size_t, N + 1> order;
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return val[a] < val[b]; });
    std::array<P, N + 1> p2;
    std::array<double, N + 1> v2;
    for (size_t i = 0; i <= N; ++i) p2[i] = pts[order[i]], v2[i] = val[order[i]];
    pts = p2;
    val = v2;
    if (val[N] - val[0] < 1e-12 * (1 + val[0])) break;
    P c{};
    for (size_t i = 0; i < N; ++i)
      for (size_t k = 0; k < N; ++k) c[k] += pts[i][k] / N;
    const P xr = lerp(c, pts[N], -1.0);
    const double fr = f(xr);
    ++evals;
    if (fr < val[0]) {
      const P xe = lerp(c, pts[N], -2.0);
      const double fe = f(xe);
      ++evals;
      if (fe < fr) pts[N] = xe, val[N] = fe;
      else pts[N] = xr, val[N] = fr;
    } else if (fr < val[N - 1]) {
      pts[N] = xr, val[N] = fr;
    } else {
      const bool outside = fr < val[N];
      const P xc = lerp(c, outside ? xr : pts[N], 0.5);
      const double fc = f(xc);
      ++evals;
      if (fc < (outside ? fr : val[N])) {
        pts[N] = xc, val[N] = fc;
      } else {
        for (size_t i = 1; i <= N; ++i) {
          pts[i] = lerp(pts[0], pts[i], 0.5);
          val[i] = f(pts[i]);
          ++evals;
        }
      }
    }
  }
  size_t best = 0;
  for (size_t i = 1; i <= N; ++i)
    if (val[i] < val[best]) best = i;
  *best_value = val[best];
  return pts[best];
}

}  // namespace

double Calibration::AccuracyAt(double threshold) const { return Interpolate(thresholds, accuracy, threshold); }

double Calibration::TokensPerStepAt(double threshold) const {
  return Interpolate(thresholds, tokens_per_step, threshold);
}

Status ValidateCalibration(const Calibration& c) {
  if (c.name.empty()) return InvalidArgument("field \"name\": must not be empty");
  RETURN_IF_ERROR(
      ValidateCurves("", c.block_size, c.thresholds, c.tokens_per_step, c.accuracy, c.steps_cv, c.cv_output_len));
  RETURN_IF_ERROR(ValidateParams(c.params));
  if (!c.fitted_tokens_per_step.empty() && c.fitted_tokens_per_step.size() != c.thresholds.size())
    return InvalidArgument("field \"fit.tokens_per_step\": has " + std::to_string(c.fitted_tokens_per_step.size()) +
                           " values for " + std::to_string(c.thresholds.size()) + " thresholds");
  return Status::Ok();
}

Status ValidateTargets(const FitTargets& t) {
  RETURN_IF_ERROR(
      ValidateCurves("", t.block_size, t.thresholds, t.tokens_per_step, t.accuracy, t.steps_cv, t.cv_output_len));
  if (!(t.sigma_block >= 0 && std::isfinite(t.sigma_block)))
    return InvalidArgument("field \"sigma_block\": must be >= 0, got " + Num(t.sigma_block));
  return Status::Ok();
}

StatusOr<Calibration> LoadCalibration(const std::string& path) {
  ASSIGN_OR_RETURN(const json j, ReadJsonFile(path, "calibration"));
  if (!j.is_object()) return InvalidArgument(path + ": must be a JSON object");
  const std::string where = path + ": ";
  static const std::set<std::string> kKnown = {"name",         "block_size", "thresholds", "tokens_per_step",
                                               "accuracy",     "steps_cv",   "cv_output_len", "params",
                                               "fit",          "source"};
  for (const auto& [key, _] : j.items())
    if (!kKnown.count(key)) return InvalidArgument(where + "unknown field \"" + SanitizeUtf8(key.substr(0, 60)) + "\"");
  Calibration c;
  RETURN_IF_ERROR(ReadString(j, where, "name", &c.name));
  if (c.name.empty()) return InvalidArgument(where + "field \"name\": must not be empty");
  RETURN_IF_ERROR(ReadInt(j, where, "block_size", &c.block_size));
  RETURN_IF_ERROR(ReadNumbers(j, where, "thresholds", &c.thresholds));
  RETURN_IF_ERROR(ReadNumbers(j, where, "tokens_per_step", &c.tokens_per_step));
  RETURN_IF_ERROR(ReadNumbers(j, where, "accuracy", &c.accuracy));
  RETURN_IF_ERROR(ReadNumber(j, where, "steps_cv", &c.steps_cv));
  if (j.contains("cv_output_len")) RETURN_IF_ERROR(ReadInt(j, where, "cv_output_len", &c.cv_output_len));
  RETURN_IF_ERROR(
      ValidateCurves(where, c.block_size, c.thresholds, c.tokens_per_step, c.accuracy, c.steps_cv, c.cv_output_len));
  if (!j.contains("params")) return Missing(where, "params");
  RETURN_IF_ERROR(ParamsFromJson(j["params"], where, &c.params));
  if (j.contains("fit")) {
    const json& f = j["fit"];
    if (!f.is_object()) return InvalidArgument(where + "field \"fit\": must be an object");
    const std::string w = where + "fit.";
    RETURN_IF_ERROR(ReadNumbers(f, w, "tokens_per_step", &c.fitted_tokens_per_step));
    if (c.fitted_tokens_per_step.size() != c.thresholds.size())
      return InvalidArgument(w + "field \"tokens_per_step\": has " + std::to_string(c.fitted_tokens_per_step.size()) +
                             " values for " + std::to_string(c.thresholds.size()) + " thresholds");
    RETURN_IF_ERROR(ReadNumber(f, w, "steps_cv", &c.fitted_steps_cv));
  }
  if (j.contains("source")) RETURN_IF_ERROR(ReadString(j, where, "source", &c.source));
  return c;
}

Status SaveCalibration(const std::string& path, const Calibration& c) {
  const Status valid = ValidateCalibration(c);
  if (!valid.ok()) return valid.WithContext("not saving " + path);
  nlohmann::ordered_json j;  // fields in reading order, not alphabetical
  j["name"] = c.name;
  j["block_size"] = c.block_size;
  j["thresholds"] = c.thresholds;
  j["tokens_per_step"] = c.tokens_per_step;
  j["accuracy"] = c.accuracy;
  j["steps_cv"] = c.steps_cv;
  j["cv_output_len"] = c.cv_output_len;
  const DenoiserParams& p = c.params;
  j["params"] = {{"mu", p.mu},       {"sigma", p.sigma}, {"sigma_request", p.sigma_request},
                 {"sigma_block", p.sigma_block}, {"delta", p.delta}, {"eta", p.eta}};
  if (!c.fitted_tokens_per_step.empty())
    j["fit"] = {{"tokens_per_step", c.fitted_tokens_per_step}, {"steps_cv", c.fitted_steps_cv}};
  j["source"] = c.source;
  std::ofstream out(path);
  if (!out) return IoError("cannot write calibration " + path);
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) return Internal("error writing calibration " + path);
  return Status::Ok();
}

SimulatedStats SimulateFixedThresholds(const DenoiserParams& params, int block_size, int output_len,
                                       const std::vector<double>& thresholds, int requests, uint64_t run_seed) {
  SimulatedStats out;
  StatisticalDenoiserOptions opt;
  opt.params = params;
  opt.run_seed = run_seed;
  opt.features = false;
  for (double c : thresholds) {
    StatisticalDenoiser d(opt);
    int64_t tokens = 0, steps = 0;
    std::vector<double> per(static_cast<size_t>(std::max(requests, 0)));
    std::vector<DenoiseCommand> cmd(1);
    for (int r = 0; r < requests; ++r) {
      policy::RequestSpec spec;
      spec.id = r;
      spec.output_len = output_len;
      d.Start(spec, block_size, static_cast<uint64_t>(r));
      cmd[0] = {r, c};
      int n = 0;
      for (;;) {
        const policy::StepOutcome o = d.Step(cmd)[0];
        if (o.unmasked == 0) break;  // output_len <= 0
        tokens += o.unmasked;
        ++n;
        if (o.request_done) break;
      }
      steps += n;
      per[static_cast<size_t>(r)] = n;
      d.Finish(r);
    }
    double mean = 0, var = 0;
    for (double v : per) mean += v;
    mean = per.empty() ? 0 : mean / per.size();
    for (double v : per) var += (v - mean) * (v - mean);
    out.tokens_per_step.push_back(steps ? static_cast<double>(tokens) / steps : 0);
    out.steps_mean.push_back(mean);
    out.steps_cv.push_back(per.empty() || mean == 0 ? 0 : std::sqrt(var / per.size()) / mean);
  }
  return out;
}

StatusOr<Calibration> FitCalibration(const FitTargets& t) {
  RETURN_IF_ERROR(ValidateTargets(t));
  const FitSample sample = MakeSample(t.block_size, t.cv_output_len / t.block_size);
  // T_c errors first; the CV is a softer target (an assumption for most models).
  constexpr double kCvWeight = 0.25;
  const double cv_scale = std::max(t.steps_cv, 0.05);
  auto objective = [&](const std::array<double, 5>& x) {
    const SampleStats s = Simulate(sample, FromVector(x, t.sigma_block), t.thresholds);
    double e = 0;
    for (size_t i = 0; i < t.thresholds.size(); ++i) {
      const double r = s.tokens_per_step[i] / t.tokens_per_step[i] - 1;
      e += r * r;
    }
    const double rc = (s.steps_cv - t.steps_cv) / cv_scale;
    return e + kCvWeight * rc * rc;
  };
  // Stage 1: a fixed coarse design (216 points from "confident tokens, little drift" to
  // "unsure tokens, strong drift"). Stage 2: Nelder-Mead from the best few, each polished
  // by a restart with a smaller simplex; the best wins. The objective is piecewise constant
  // on a fine scale and has several basins, so one local search is not enough.
  using X = std::array<double, 5>;
  std::vector<std::pair<double, X>> design;
  for (double mu : {-1.0, 1.0, 3.0, 5.0})
    for (double sigma : {1.0, 2.0, 3.0})
      for (double delta : {0.1, 0.5, 1.5})
        for (double eta : {0.5, 2.0, 5.0})
          for (double sr : {0.3, 1.0}) {
            const X x = {mu, std::log(sigma), delta, eta, sr};
            design.emplace_back(objective(x), x);
          }
  std::stable_sort(design.begin(), design.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  constexpr size_t kStarts = 3;
  const X step = {0.8, 0.4, 0.3, 0.8, 0.4};
  X small;
  for (size_t i = 0; i < 5; ++i) small[i] = step[i] * 0.25;
  X best_x{};
  double best = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < std::min(kStarts, design.size()); ++k) {
    double v = 0;
    X x = NelderMead<5>(objective, design[k].second, step, 300, &v);
    x = NelderMead<5>(objective, x, small, 200, &v);
    if (v < best) best = v, best_x = x;
  }
  Calibration c;
  c.name = t.name.empty() ? "fitted" : t.name;
  c.block_size = t.block_size;
  c.thresholds = t.thresholds;
  c.tokens_per_step = t.tokens_per_step;
  c.accuracy = t.accuracy;
  c.steps_cv = t.steps_cv;
  c.cv_output_len = t.cv_output_len;
  c.params = FromVector(best_x, t.sigma_block);
  c.source = t.source;
  // Check on the real simulator with fresh draws, not the fit sample.
  constexpr int kCheckRequests = 10000;
  const SimulatedStats check = SimulateFixedThresholds(c.params, c.block_size, c.cv_output_len, c.thresholds, kCheckRequests, 1);
  c.fitted_tokens_per_step = check.tokens_per_step;
  c.fitted_steps_cv = check.steps_cv.front();
  return c;
}

StatusOr<FitTargets> TargetsFromStepLogs(const std::vector<std::string>& paths, const StepLogOptions& opt) {
  if (paths.empty()) return InvalidArgument("no step logs given");
  struct Open {
    int64_t steps = 0;
    int key = 0;  // threshold key of all its steps; -1 once mixed
    int max_block = 0;
  };
  struct Done {
    int64_t steps;
    int key;
    int blocks;
  };
  std::map<int, std::pair<int64_t, int64_t>, std::greater<int>> by_key;  // key -> (tokens, steps)
  std::vector<Done> done;
  int64_t block_upper = std::numeric_limits<int64_t>::max();  // inferred B (min of floor(pos / block))
  int64_t max_pos = -1;
  int64_t lines_total = 0;
  for (const std::string& path : paths) {
    std::map<int64_t, Open> open;
    RETURN_IF_ERROR(ForEachJsonLine(path, "step log", [&](int, const json& j) -> Status {
      const std::string where;
      if (!j.is_object()) return InvalidArgument("not a JSON object");
      if (!j.contains("request") || !j["request"].is_number_integer()) return Missing(where, "request");
      if (!j.contains("threshold") || !j["threshold"].is_number()) return Missing(where, "threshold");
      if (!j.contains("block") || !j["block"].is_number_integer()) return Missing(where, "block");
      if (!j.contains("unmasked") || !j["unmasked"].is_array()) return Missing(where, "unmasked");
      if (!j.contains("done") || !j["done"].is_boolean()) return Missing(where, "done");
      ASSIGN_OR_RETURN(const int64_t id, JsonInt(j["request"], "field \"request\"", 0, INT64_MAX));
      const double th = j["threshold"].get<double>();
      if (!(th > 0 && th <= 1)) return InvalidArgument(where + "field \"threshold\": must be in (0, 1]");
      const int key = static_cast<int>(std::lround(th * 1e4));
      ASSIGN_OR_RETURN(const int64_t block,
                       JsonInt(j["block"], "field \"block\"", 0, kMaxCalibrationOutput - 1));
      const json& un = j["unmasked"];
      for (const json& u : un) {
        if (!u.is_array() || u.empty() || !u[0].is_number_integer())
          return InvalidArgument(where + "field \"unmasked\": must hold [position, token] pairs");
        ASSIGN_OR_RETURN(const int64_t pos,
                         JsonInt(u[0], "field \"unmasked\": position", 0, kMaxCalibrationOutput - 1));
        max_pos = std::max(max_pos, pos);
        if (block >= 1) block_upper = std::min(block_upper, pos / block);
      }
      auto& [tokens, steps] = by_key[key];
      tokens += static_cast<int64_t>(un.size());
      ++steps;
      ++lines_total;
      auto [it, fresh] = open.try_emplace(id);
      Open& r = it->second;
      if (fresh) r.key = key;
      ++r.steps;
      if (r.key != key) r.key = -1;
      r.max_block = std::max(r.max_block, static_cast<int>(block));
      if (j["done"].get<bool>()) {
        done.push_back({r.steps, r.key, r.max_block + 1});
        open.erase(it);
      }
      return Status::Ok();
    }));
  }
  if (by_key.empty()) return InvalidArgument("step logs hold no steps");
  FitTargets t;
  t.name = opt.name;
  t.sigma_block = opt.sigma_block;
  int max_blocks = 1;
  for (const Done& d : done) max_blocks = std::max(max_blocks, d.blocks);
  int64_t block_size = 0;
  if (opt.block_size > 0) block_size = opt.block_size;
  else if (block_upper != std::numeric_limits<int64_t>::max()) block_size = block_upper;
  else block_size = max_pos + 1;  // single-block outputs
  if (block_size <= 0) return InvalidArgument("cannot infer the block size from the step logs");
  if (block_size > kMaxCalibrationBlock || int64_t{max_blocks} * block_size > kMaxCalibrationOutput)
    return InvalidArgument("block size " + std::to_string(block_size) + " x " + std::to_string(max_blocks) +
                           " blocks: a calibration allows blocks of at most " + std::to_string(kMaxCalibrationBlock) +
                           " and outputs of at most " + std::to_string(kMaxCalibrationOutput) + " tokens");
  t.block_size = static_cast<int>(block_size);
  t.cv_output_len = max_blocks * t.block_size;
  std::vector<double> steps_w;
  for (const auto& [key, ts] : by_key) {
    t.thresholds.push_back(key / 1e4);
    t.tokens_per_step.push_back(static_cast<double>(ts.first) / ts.second);
    steps_w.push_back(static_cast<double>(ts.second));
  }
  // Pool adjacent violators: T_c must not fall as c falls.
  bool pooled = false;
  {
    const std::vector<double>& v = t.tokens_per_step;
    const std::vector<double>& w = steps_w;
    std::vector<double> bv, bw;
    std::vector<int> bl;
    for (size_t i = 0; i < v.size(); ++i) {
      bv.push_back(v[i]), bw.push_back(w[i]), bl.push_back(1);
      while (bv.size() > 1 && bv[bv.size() - 2] > bv.back()) {
        const double nw = bw[bw.size() - 2] + bw.back();
        const double nv = (bv[bv.size() - 2] * bw[bw.size() - 2] + bv.back() * bw.back()) / nw;
        const int nl = bl[bl.size() - 2] + bl.back();
        bv.pop_back(), bw.pop_back(), bl.pop_back();
        bv.back() = nv, bw.back() = nw, bl.back() = nl;
        pooled = true;
      }
    }
    std::vector<double> fixed;
    for (size_t b = 0; b < bv.size(); ++b) fixed.insert(fixed.end(), static_cast<size_t>(bl[b]), bv[b]);
    t.tokens_per_step = fixed;
  }
  for (double& v : t.tokens_per_step) v = std::clamp(v, 1.0, static_cast<double>(t.block_size));
  // CV of steps per request at the top threshold.
  const int top = by_key.begin()->first;
  std::vector<double> per;
  for (const Done& d : done)
    if (d.key == top) per.push_back(static_cast<double>(d.steps));
  if (per.size() < 2)
    return InvalidArgument("step logs hold fewer than 2 finished requests run entirely at threshold " +
                           Num(top / 1e4));
  double mean = 0, var = 0;
  for (double v : per) mean += v;
  mean /= per.size();
  for (double v : per) var += (v - mean) * (v - mean);
  t.steps_cv = std::sqrt(var / per.size()) / mean;
  // Accuracy.
  if (!opt.accuracy.empty()) {
    if (opt.accuracy.size() != t.thresholds.size())
      return InvalidArgument("accuracy: " + std::to_string(opt.accuracy.size()) + " values for the " +
                             std::to_string(t.thresholds.size()) + " thresholds in the step logs");
    t.accuracy = opt.accuracy;
  } else {
    if (opt.eval_json.empty()) return InvalidArgument("accuracy: give an eval JSON or the accuracy per threshold");
    ASSIGN_OR_RETURN(const json e, ReadJsonFile(opt.eval_json, "eval results"));
    if (!e.is_object()) return InvalidArgument(opt.eval_json + ": not a JSON object");
    if (!e.contains("rows") || !e["rows"].is_array()) return Missing(opt.eval_json + ": ", "rows");
    for (double th : t.thresholds) {
      const json* pick = nullptr;
      for (const json& r : e["rows"]) {
        if (!r.is_object() || !r.contains("threshold") || !r["threshold"].is_number() || !r.contains("accuracy") ||
            !r["accuracy"].is_number())
          return InvalidArgument(opt.eval_json + ": rows need numeric \"threshold\" and \"accuracy\"");
        if (std::abs(r["threshold"].get<double>() - th) > 5e-5) continue;
        const bool cache = r.contains("cache") && r["cache"].is_boolean() && r["cache"].get<bool>();
        if (!pick || cache == opt.cache_rows) pick = &r;
      }
      if (!pick) return InvalidArgument(opt.eval_json + ": no row for threshold " + Num(th));
      t.accuracy.push_back((*pick)["accuracy"].get<double>());
    }
  }
  std::ostringstream src;
  // File names only: where the logs lay on the fitting machine means nothing elsewhere.
  const auto name = [](const std::string& p) { return std::filesystem::path(p).filename().string(); };
  src << "fitted from step logs";
  for (const std::string& p : paths) src << " " << name(p);
  src << " (" << lines_total << " steps, " << done.size() << " finished requests";
  if (!opt.eval_json.empty() && opt.accuracy.empty()) src << "; accuracy from " << name(opt.eval_json);
  src << ")";
  if (pooled) src << "; tokens_per_step made monotone by pool-adjacent-violators";
  t.source = src.str();
  RETURN_IF_ERROR(ValidateTargets(t));
  return t;
}

}  // namespace tediserve::sim
