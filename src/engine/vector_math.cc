#include "engine/vector_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/float16.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TEDI_MULTIVERSION __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define TEDI_MULTIVERSION
#endif

namespace tediserve::engine::vec {
namespace {

// exp(x) = 2^k * exp(r), k = round(x / ln2), |r| <= ln2/2; exp(r) by a degree-6 polynomial.
// Branch-free so that the loops around it vectorise: plain ternaries (GCC turns them into
// min/max/blend; std::fmin/fmax and a shared bool left "control flow in loop" and scalar code).
inline float FastExp(float x) {
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 88.3f ? 88.3f : xc;
  // Round to nearest by the 1.5 * 2^23 trick: plain arithmetic, where std::floor became a
  // library call inside the target clones and kept the loop scalar.
  const float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float e = p * std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return x < -87.3f ? 0.0f : e;  // below the normal range: 0, as the softmax wants
}

}  // namespace

TEDI_MULTIVERSION
void Softmax(float* row, int n) {
  // The reductions are declared (OpenMP SIMD pragmas, -fopenmp-simd) so that they vectorise:
  // GCC otherwise keeps a float max/sum in order, and the loop around the exp with it.
  float m = row[0];
#pragma omp simd reduction(max : m)
  for (int i = 1; i < n; ++i) m = row[i] > m ? row[i] : m;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) {
    row[i] = FastExp(row[i] - m);
    sum += row[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) row[i] *= inv;
}

TEDI_MULTIVERSION
void SiluMul(float* g, const float* u, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) g[i] = g[i] / (1.0f + FastExp(-g[i])) * u[i];
}

TEDI_MULTIVERSION
void RmsNorm(const float* x, const float* w, int n, float eps, float* y) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

TEDI_MULTIVERSION
void Add(float* y, const float* x, long n) {
  for (long i = 0; i < n; ++i) y[i] += x[i];
}

TEDI_MULTIVERSION
void Bf16ToFloat(const uint16_t* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
// The F16C instruction converts 8 halves at a time, exactly (subnormals and infinities
// included; a NaN stays a NaN, quieted).
__attribute__((target("avx,f16c"))) void F16ToFloatF16c(const uint16_t* x, float* y, long n) {
  long i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = ::tediserve::engine::F16ToFloat(x[i]);
}
const bool kHasF16c = [] {
  __builtin_cpu_init();  // needed before __builtin_cpu_supports in a static initialiser
  // clang's builtin knows no "f16c"; every x86 CPU with AVX2 has F16C (Intel since Haswell,
  // AMD since Piledriver), so AVX2 is the test.
  return __builtin_cpu_supports("avx2") != 0;
}();
}  // namespace
#endif

void F16ToFloat(const uint16_t* x, float* y, long n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kHasF16c) {
    F16ToFloatF16c(x, y, n);
    return;
  }
#endif
  for (long i = 0; i < n; ++i) y[i] = ::tediserve::engine::F16ToFloat(x[i]);
}

TEDI_MULTIVERSION
void Exp(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = FastExp(x[i]);
}

}  // namespace tediserve::engine::vec
