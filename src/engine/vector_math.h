// The element-wise kernels of the forward pass (softmax, SiLU gate, RMSNorm, residual add).
// They are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time, so one
// binary runs anywhere and uses the vector units it finds. exp() is a polynomial (relative
// error below 2e-7 over the float range), because libm's scalar exp dominated small steps.
#pragma once

#include <cstdint>

namespace tediserve::engine::vec {

// row[i] = exp(row[i] - max) / sum, in place.
void Softmax(float* row, int n);

// g[i] = silu(g[i]) * u[i].
void SiluMul(float* g, const float* u, int n);

// y = x / sqrt(mean(x^2) + eps) * w.
void RmsNorm(const float* x, const float* w, int n, float eps, float* y);

// y[i] += x[i].
void Add(float* y, const float* x, long n);

// bfloat16 / IEEE binary16 bit patterns to fp32 (exact), n elements.
void Bf16ToFloat(const uint16_t* x, float* y, long n);
void F16ToFloat(const uint16_t* x, float* y, long n);

// exp(x) element-wise (for tests of the approximation).
void Exp(const float* x, float* y, int n);

}  // namespace tediserve::engine::vec
