// The simulator's fitted statistical denoising model (docs/design.md section 4.2 (b)).
//
// Each block of a request draws B latent logits z_j = mu_rk + sigma * eps_j, with
// mu_rk = mu + sigma_request * eta_r + sigma_block * xi_rk (eta_r once per request, xi_rk once
// per block, eps_j per token; all standard normal), and sorts them descending once. At a step
// the confidence of a masked position is sigmoid(z_j + D), where D, the block's drift, starts
// at 0 and after every step grows by delta + eta * unmasked / B (unmasked neighbours make the
// rest more certain). A step at threshold c unmasks every masked position with confidence
// >= c, or the single most confident one if none clears c (docs/design.md section 2.4).
// Because the masked set is always a suffix of the sorted array, a step is a pointer advance:
// O(1 + tokens unmasked), and O(B log B) once per block for the draws.
//
// Features (taken before the step, like the engine's): the block summary is exact (linear-
// interpolated quantiles, as numpy), except that above 16 masked positions the mean is
// estimated from 16 evenly spaced ranks. Later blocks are fully masked and not drawn yet; the
// output summary treats them as their start distribution N(mu_r, sigma^2 + sigma_block^2),
// represented by 32 quantile points, mixed with the block's masked positions (weighted lower
// quantiles, min taken at the 1/64 quantile). Cost per step: at most ~20 sigmoids and one
// merge of <= B + 32 values (~0.3 us on one core).
//
// All randomness is a counter-based hash of (run seed, request seed, block, token), so the
// oracle replays a request's future exactly without touching its state, and a request's
// behaviour does not depend on what else runs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "sim/denoiser.h"

namespace tediserve::sim {

// The fitted parameters (logit units). See the header comment for their meaning.
struct DenoiserParams {
  double mu = 0.0;             // population mean of the token logits
  double sigma = 1.0;          // spread of token logits within a block (> 0)
  double sigma_request = 0.0;  // spread of a request's mean logit (between requests)
  double sigma_block = 0.0;    // spread of a block's mean logit around its request's
  double delta = 0.0;          // drift added after every step
  double eta = 0.0;            // drift added per unmasked fraction of the block
};

// Finite values, sigma > 0 and the rest >= 0 (delta, eta >= 0 make a lower threshold never
// need more steps). The message names the bad field.
Status ValidateParams(const DenoiserParams& p);

struct StatisticalDenoiserOptions {
  DenoiserParams params;
  uint64_t run_seed = 0;
  // Compute ConfidenceFeatures (off: they stay zero; a step is then a pure pointer advance).
  bool features = true;
  // The engine reports output == block on cache steps (it only sees the block there);
  // true copies that, false always summarises the whole output.
  bool engine_like_output = false;
};

struct Calibration;  // sim/calibration.h

class StatisticalDenoiser final : public DenoiserModel {
 public:
  // The options must pass ValidateParams; Create checks, the constructor asserts.
  explicit StatisticalDenoiser(const StatisticalDenoiserOptions& options);
  // A loaded (hence validated) calibration's parameters, features on, whole-output summaries.
  StatisticalDenoiser(const Calibration& calibration, uint64_t run_seed);
  static StatusOr<std::unique_ptr<StatisticalDenoiser>> Create(const StatisticalDenoiserOptions& options);
  ~StatisticalDenoiser() override;
  StatisticalDenoiser(StatisticalDenoiser&&) noexcept;
  StatisticalDenoiser& operator=(StatisticalDenoiser&&) noexcept;

  // Ids must be >= 0 (they are dense per run; state lives in a vector indexed by id); a
  // negative id is ignored, a live id is restarted. output_len <= 0 makes a request that is
  // done at once; a last block shorter than block_size is allowed. The calibration's block
  // size is the one its T_c hold for.
  void Start(const policy::RequestSpec& spec, int block_size, uint64_t seed) override;
  // An unknown or finished id yields {unmasked 0, block_done, request_done} (a caller bug).
  std::vector<policy::StepOutcome> Step(const std::vector<DenoiseCommand>& batch) override;
  // Exact (same draws as Step). Cost O(B) plus, the first time a request sees a threshold,
  // O(remaining blocks * B log B); later calls with that threshold reuse a per-request cache.
  // Not thread-safe against other calls on this object (the cache is mutable).
  int RemainingSteps(policy::RequestId id, double threshold) const override;
  void Finish(policy::RequestId id) override;

  bool Active(policy::RequestId id) const;
  // Steps the request has taken so far (0 for unknown ids).
  int StepsTaken(policy::RequestId id) const;

 private:
  struct Request;
  Request* Find(policy::RequestId id) const;
  void BeginBlock(Request& r) const;
  void DrawBlock(const Request& r, int block, std::vector<float>* z) const;
  int FreshBlockSteps(const Request& r, int block, double threshold_logit) const;
  void Features(const Request& r, policy::ConfidenceFeatures* f) const;

  StatisticalDenoiserOptions opt_;
  std::array<double, policy::kDefaultThresholds.size()> candidate_logits_{};
  std::vector<std::unique_ptr<Request>> requests_;  // indexed by id
  mutable std::vector<float> scratch_;              // the oracle's block draws
};

// ---- Building blocks, shared with the fit (calibration.cc) ----

// log(c / (1 - c)); +inf for c >= 1 (only the fallback unmasks), -inf for c <= 0.
double ThresholdLogit(double threshold);

// A block in progress: the masked positions are z[pos..), drift D.
struct BlockCursor {
  int pos = 0;
  double drift = 0.0;
};

// One step on a block whose logits z are sorted descending. Returns the tokens unmasked
// (>= 1 unless the block is already done, then 0) and advances the cursor.
int AdvanceBlock(std::span<const float> z, double threshold_logit, const DenoiserParams& p, int block_size,
                 BlockCursor* cursor);

// Steps to finish the block from `cursor` if every step uses the same threshold.
int StepsToFinish(std::span<const float> z, double threshold_logit, const DenoiserParams& p, int block_size,
                  BlockCursor cursor);

// Deterministic standard normals (Box-Muller on a splitmix64 counter hash of key): the same
// on every platform with an IEEE libm, unlike std::normal_distribution.
void StandardNormals(uint64_t key, std::span<float> out);
double StandardNormal(uint64_t key);
// Mixes two 64-bit values into a well-spread key (splitmix64).
uint64_t HashCombine(uint64_t a, uint64_t b);

}  // namespace tediserve::sim
