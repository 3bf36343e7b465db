#include "sim/statistical_denoiser.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>

#include "sim/calibration.h"

namespace tediserve::sim {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t SplitMix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), never 0 (Box-Muller takes its log).
double Uniform(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

// Float math: features are floats, and expf is about twice as fast as exp.
float Sigmoid(double x) { return 1.0f / (1.0f + std::exp(-static_cast<float>(x))); }

// The later blocks of the output are fully masked; their confidences are approximated by a
// block's start distribution, N(mu_r, sigma^2 + sigma_block^2) in logits, represented by
// kGrid midpoint quantiles of the standard normal.
constexpr int kGrid = 32;

const std::array<double, kGrid>& NormalGrid() {
  static const std::array<double, kGrid> grid = [] {
    std::array<double, kGrid> g{};
    for (int i = 0; i < kGrid; ++i) {
      const double p = (i + 0.5) / kGrid;
      double lo = -10, hi = 10;  // bisection on Phi: runs once, needs no tables
      for (int it = 0; it < 100; ++it) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::numbers::sqrt2) < p ? lo : hi) = mid;
      }
      g[i] = 0.5 * (lo + hi);
    }
    return g;
  }();
  return grid;
}

// Above this many masked positions the block mean is estimated from this many evenly spaced
// ranks of the sorted array (error well under 1%), so that a step stays O(1).
constexpr int kMeanSamples = 16;

}  // namespace

uint64_t HashCombine(uint64_t a, uint64_t b) { return SplitMix(a ^ SplitMix(b + kGolden)); }

void StandardNormals(uint64_t key, std::span<float> out) {
  const size_t n = out.size();
  for (size_t i = 0; i < n; i += 2) {
    // Counter-based: token pair i/2 reads hashes 2m and 2m+1 of the key's stream.
    const double u1 = Uniform(SplitMix(key + (i + 1) * kGolden));
    const double u2 = Uniform(SplitMix(key + (i + 2) * kGolden));
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
  }
}

double StandardNormal(uint64_t key) {
  float v[1];
  StandardNormals(key, v);
  return v[0];
}

Status ValidateParams(const DenoiserParams& p) {
  const std::pair<const char*, double> fields[] = {{"mu", p.mu},
                                                   {"sigma", p.sigma},
                                                   {"sigma_request", p.sigma_request},
                                                   {"sigma_block", p.sigma_block},
                                                   {"delta", p.delta},
                                                   {"eta", p.eta}};
  for (const auto& [name, v] : fields) {
    if (!std::isfinite(v)) return InvalidArgument(std::string("params.") + name + " must be finite");
    if (std::string(name) != "mu" && v < 0)
      return InvalidArgument(std::string("params.") + name + " must be >= 0, got " + std::to_string(v));
  }
  if (!(p.sigma > 0)) return InvalidArgument("params.sigma must be > 0, got " + std::to_string(p.sigma));
  return Status::Ok();
}

double ThresholdLogit(double c) {
  if (c >= 1.0) return std::numeric_limits<double>::infinity();
  if (c <= 0.0) return -std::numeric_limits<double>::infinity();
  return std::log(c / (1.0 - c));
}

int AdvanceBlock(std::span<const float> z, double threshold_logit, const DenoiserParams& p, int block_size,
                 BlockCursor* cursor) {
  const int len = static_cast<int>(z.size());
  if (cursor->pos >= len) return 0;
  // conf >= c  <=>  z + D >= logit(c); the masked set stays a suffix of the sorted array.
  const double cut = threshold_logit - cursor->drift;
  int end = cursor->pos;
  while (end < len && static_cast<double>(z[end]) >= cut) ++end;
  if (end == cursor->pos) end = cursor->pos + 1;  // none clears c: the most confident one
  const int n = end - cursor->pos;
  cursor->pos = end;
  cursor->drift += p.delta + p.eta * n / block_size;
  return n;
}

int StepsToFinish(std::span<const float> z, double threshold_logit, const DenoiserParams& p, int block_size,
                  BlockCursor cursor) {
  int steps = 0;
  while (AdvanceBlock(z, threshold_logit, p, block_size, &cursor) > 0) ++steps;
  return steps;
}

struct StatisticalDenoiser::Request {
  uint64_t key = 0;
  int block_size = 1;
  int output_len = 0;
  int n_blocks = 0;
  int block = 0;  // the current block
  int steps_in_block = 0;
  int steps = 0;
  bool done = false;
  double mu_r = 0;          // the request's mean logit
  double future_sd = 0;     // logit spread of a not-yet-started block
  float future_mean = 0;    // mean confidence of a not-yet-started block at its start
  BlockCursor cur;
  std::vector<float> z;     // the current block's logits, sorted descending

  // Oracle cache: for a threshold logit, suffix[k] = steps of blocks k.. started fresh.
  struct OracleEntry {
    double threshold_logit;
    std::vector<int> suffix;
  };
  mutable std::vector<OracleEntry> oracle;
  mutable size_t oracle_next = 0;

  int BlockLen(int k) const { return std::min(block_size, output_len - k * block_size); }
};

StatisticalDenoiser::StatisticalDenoiser(const StatisticalDenoiserOptions& options) : opt_(options) {
  assert(ValidateParams(opt_.params).ok());
  for (size_t k = 0; k < policy::kDefaultThresholds.size(); ++k)
    candidate_logits_[k] = ThresholdLogit(policy::kDefaultThresholds[k]);
}

namespace {
StatisticalDenoiserOptions FromCalibration(const Calibration& cal, uint64_t run_seed) {
  StatisticalDenoiserOptions o;
  o.params = cal.params;
  o.run_seed = run_seed;
  return o;
}
}  // namespace

StatisticalDenoiser::StatisticalDenoiser(const Calibration& calibration, uint64_t run_seed)
    : StatisticalDenoiser(FromCalibration(calibration, run_seed)) {}

StatusOr<std::unique_ptr<StatisticalDenoiser>> StatisticalDenoiser::Create(const StatisticalDenoiserOptions& options) {
  RETURN_IF_ERROR(ValidateParams(options.params));
  return std::make_unique<StatisticalDenoiser>(options);
}

StatisticalDenoiser::~StatisticalDenoiser() = default;
StatisticalDenoiser::StatisticalDenoiser(StatisticalDenoiser&&) noexcept = default;
StatisticalDenoiser& StatisticalDenoiser::operator=(StatisticalDenoiser&&) noexcept = default;

StatisticalDenoiser::Request* StatisticalDenoiser::Find(policy::RequestId id) const {
  if (id < 0 || static_cast<size_t>(id) >= requests_.size()) return nullptr;
  return requests_[static_cast<size_t>(id)].get();
}

bool StatisticalDenoiser::Active(policy::RequestId id) const {
  const Request* r = Find(id);
  return r && !r->done;
}

int StatisticalDenoiser::StepsTaken(policy::RequestId id) const {
  const Request* r = Find(id);
  return r ? r->steps : 0;
}

void StatisticalDenoiser::DrawBlock(const Request& r, int block, std::vector<float>* z) const {
  const DenoiserParams& p = opt_.params;
  const uint64_t key = HashCombine(r.key, static_cast<uint64_t>(block) + 1);
  z->resize(static_cast<size_t>(r.BlockLen(block)));
  StandardNormals(key, *z);
  // Sorting the standard draws is the same as sorting the logits (sigma > 0).
  std::sort(z->begin(), z->end(), std::greater<float>());
  const double mean = r.mu_r + p.sigma_block * StandardNormal(HashCombine(key, ~0ull));
  for (float& v : *z) v = static_cast<float>(mean + p.sigma * v);
}

void StatisticalDenoiser::BeginBlock(Request& r) const {
  DrawBlock(r, r.block, &r.z);
  r.cur = BlockCursor{};
  r.steps_in_block = 0;
}

int StatisticalDenoiser::FreshBlockSteps(const Request& r, int block, double threshold_logit) const {
  DrawBlock(r, block, &scratch_);
  return StepsToFinish(scratch_, threshold_logit, opt_.params, r.block_size, BlockCursor{});
}

void StatisticalDenoiser::Start(const policy::RequestSpec& spec, int block_size, uint64_t seed) {
  if (spec.id < 0) return;
  const size_t idx = static_cast<size_t>(spec.id);
  if (idx >= requests_.size()) requests_.resize(std::max(idx + 1, requests_.size() * 2));
  auto r = std::make_unique<Request>();
  const DenoiserParams& p = opt_.params;
  r->key = HashCombine(opt_.run_seed, seed);
  r->output_len = std::max(0, spec.output_len);
  r->block_size = block_size > 0 ? block_size : std::max(1, r->output_len);
  r->n_blocks = (r->output_len + r->block_size - 1) / r->block_size;
  r->mu_r = p.mu + p.sigma_request * StandardNormal(HashCombine(r->key, 0));
  r->future_sd = std::sqrt(p.sigma * p.sigma + p.sigma_block * p.sigma_block);
  double sum = 0;
  for (double g : NormalGrid()) sum += Sigmoid(r->mu_r + r->future_sd * g);
  r->future_mean = static_cast<float>(sum / kGrid);
  r->done = r->n_blocks == 0;
  if (!r->done) BeginBlock(*r);
  requests_[idx] = std::move(r);
}

void StatisticalDenoiser::Features(const Request& r, policy::ConfidenceFeatures* f) const {
  const int len = static_cast<int>(r.z.size());
  const int pos = r.cur.pos;
  const int m = len - pos;
  const double d = r.cur.drift;
  const float* z = r.z.data();
  // Ascending rank i is sorted index len-1-i.
  auto asc = [&](int i) { return static_cast<double>(z[len - 1 - i]) + d; };

  policy::ConfidenceSummary& b = f->block;
  b.count = m;
  auto quant = [&](double q) {  // linear interpolation (numpy's default, as the engine)
    const double at = q * (m - 1);
    const int i = static_cast<int>(at);
    const double frac = at - i;
    const float lo = Sigmoid(asc(i));
    return i + 1 < m ? static_cast<float>(lo * (1 - frac) + Sigmoid(asc(i + 1)) * frac) : lo;
  };
  b.min = Sigmoid(asc(0));
  b.q1 = quant(0.25);
  b.median = quant(0.5);
  b.q3 = quant(0.75);
  double sum = 0;
  if (m <= kMeanSamples) {
    for (int j = pos; j < len; ++j) sum += Sigmoid(z[j] + d);
  } else {
    for (int s = 0; s < kMeanSamples; ++s) sum += Sigmoid(asc(static_cast<int>((s + 0.5) * m / kMeanSamples)));
    sum *= static_cast<double>(m) / kMeanSamples;
  }
  b.mean = static_cast<float>(sum / m);

  // Same comparison as AdvanceBlock: block_above[k] is what a step at that threshold unmasks.
  // The cuts rise as the thresholds fall, so one walk down the sorted array counts them all.
  int j = pos;
  for (size_t k = 0; k < f->block_above.size(); ++k) {
    const double cut = candidate_logits_[k] - d;
    while (j < len && static_cast<double>(z[j]) >= cut) ++j;
    f->block_above[k] = j - pos;
  }

  const int later = r.output_len - (r.block * r.block_size + len);
  if (later <= 0 || (opt_.engine_like_output && r.steps_in_block > 0)) {
    f->output = b;
    return;
  }
  // Whole output: this block's masked positions (weight 1 each) plus `later` positions drawn
  // from the start distribution (kGrid points of weight later / kGrid). Quantiles are the
  // weighted lower quantiles of that mixture, from one merge of the two ascending lists:
  // O(B + kGrid), cheap next to a search (no unpredictable nested branches).
  const auto& grid = NormalGrid();
  const double w = static_cast<double>(later) / kGrid;
  auto fut = [&](int i) { return r.mu_r + r.future_sd * grid[i]; };
  const double total = m + static_cast<double>(later);
  const std::array<double, 3> target = {0.25 * (total - 1) + 1, 0.5 * (total - 1) + 1, 0.75 * (total - 1) + 1};
  std::array<double, 3> qv{};
  int ie = 0, ig = 0, qk = 0;
  double acc = 0, v = 0;
  while (qk < 3 && (ie < m || ig < kGrid)) {
    if (ie < m && (ig == kGrid || asc(ie) <= fut(ig))) {
      v = asc(ie++);
      acc += 1;
    } else {
      v = fut(ig++);
      acc += w;
    }
    while (qk < 3 && acc >= target[qk]) qv[qk++] = v;
  }
  for (; qk < 3; ++qk) qv[qk] = v;  // rounding left the last target unmet: the largest value
  policy::ConfidenceSummary& o = f->output;
  o.count = m + later;
  o.min = Sigmoid(std::min(asc(0), fut(0)));
  o.q1 = Sigmoid(qv[0]);
  o.median = Sigmoid(qv[1]);
  o.q3 = Sigmoid(qv[2]);
  o.mean = static_cast<float>((sum + static_cast<double>(later) * r.future_mean) / total);
}

std::vector<policy::StepOutcome> StatisticalDenoiser::Step(const std::vector<DenoiseCommand>& batch) {
  std::vector<policy::StepOutcome> out(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    policy::StepOutcome& o = out[i];
    o.id = batch[i].id;
    Request* r = Find(batch[i].id);
    if (!r || r->done) {
      o.block_done = o.request_done = true;
      continue;
    }
    if (opt_.features) Features(*r, &o.features);
    o.unmasked = AdvanceBlock(r->z, ThresholdLogit(batch[i].threshold), opt_.params, r->block_size, &r->cur);
    ++r->steps;
    ++r->steps_in_block;
    if (r->cur.pos < static_cast<int>(r->z.size())) continue;
    o.block_done = true;
    if (++r->block == r->n_blocks) {
      r->done = o.request_done = true;
    } else {
      BeginBlock(*r);
    }
  }
  return out;
}

int StatisticalDenoiser::RemainingSteps(policy::RequestId id, double threshold) const {
  const Request* r = Find(id);
  if (!r || r->done) return 0;
  const double tl = ThresholdLogit(threshold);
  int steps = StepsToFinish(r->z, tl, opt_.params, r->block_size, r->cur);
  if (r->block + 1 >= r->n_blocks) return steps;
  const Request::OracleEntry* hit = nullptr;
  for (const auto& e : r->oracle)
    // Entries fill suffixes after the block they were made in; they stay valid as blocks only advance.
    if (e.threshold_logit == tl || (std::isnan(e.threshold_logit) && std::isnan(tl))) hit = &e;
  if (!hit) {
    Request::OracleEntry e{tl, std::vector<int>(static_cast<size_t>(r->n_blocks) + 1, 0)};
    for (int k = r->n_blocks - 1; k > r->block; --k) e.suffix[k] = e.suffix[k + 1] + FreshBlockSteps(*r, k, tl);
    constexpr size_t kMaxEntries = 8;
    if (r->oracle.size() < kMaxEntries) {
      r->oracle.push_back(std::move(e));
      hit = &r->oracle.back();
    } else {
      r->oracle[r->oracle_next] = std::move(e);
      hit = &r->oracle[r->oracle_next];
      r->oracle_next = (r->oracle_next + 1) % kMaxEntries;
    }
  }
  return steps + hit->suffix[static_cast<size_t>(r->block) + 1];
}

void StatisticalDenoiser::Finish(policy::RequestId id) {
  if (Find(id)) requests_[static_cast<size_t>(id)].reset();
}

}  // namespace tediserve::sim
