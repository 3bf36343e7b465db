// An independent reference for engine tests: the forward pass of the published LLaDA and
// Dream architectures written out naively in double precision from the checkpoint tensors
// by name (no sharding, no fused weights, no KV buffer, no vectorised kernels), following
// the Hugging Face modelling code's formulas:
//  - RMSNorm: x / sqrt(mean(x^2) + eps) * w;
//  - RoPE, rotate-half form: for i < hd/2, angle = pos * theta^(-2i/hd),
//    (a, b) = (x[i], x[i+hd/2]) -> (a cos - b sin, b cos + a sin);
//  - attention over every position (no causal mask), query head h reads kv head
//    h / (heads / kv_heads) (repeat_kv), scores scaled by 1/sqrt(hd);
//  - MLP: down(silu(gate(x)) * up(x)) (LLaDA: ff_out(silu(ff_proj(x)) * up_proj(x)));
//  - Dream: q/k/v biases, and shifted logits: position p takes the logits of hidden row
//    p - 1 (position 0 its own).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace tediserve::engine::testing {

// tensors: name -> values (row-major) as the checkpoint holds them. Returns [S x vocab].
inline std::vector<double> ReferenceLogits(const ModelConfig& c,
                                           const std::map<std::string, std::vector<float>>& t,
                                           const std::vector<int32_t>& tokens) {
  const bool llada = c.arch == Architecture::kLLaDA;
  const int S = static_cast<int>(tokens.size()), d = c.d_model, H = c.n_heads, KV = c.n_kv_heads;
  const int hd = d / H, V = c.vocab_size, F = c.mlp_hidden;
  auto W = [&](const std::string& name) -> const std::vector<float>& { return t.at(name); };
  // y[S x out] = x[S x in] * w^T (+ b)
  auto linear = [&](const std::vector<double>& x, int in, const std::vector<float>& w, int out,
                    const std::vector<float>* b) {
    std::vector<double> y(static_cast<size_t>(S) * out);
    for (int s = 0; s < S; ++s)
      for (int o = 0; o < out; ++o) {
        double acc = b ? (*b)[o] : 0.0;
        for (int i = 0; i < in; ++i) acc += x[static_cast<size_t>(s) * in + i] * w[static_cast<size_t>(o) * in + i];
        y[static_cast<size_t>(s) * out + o] = acc;
      }
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& w) {
    std::vector<double> y(x.size());
    for (int s = 0; s < S; ++s) {
      double ss = 0;
      for (int i = 0; i < d; ++i) ss += x[static_cast<size_t>(s) * d + i] * x[static_cast<size_t>(s) * d + i];
      const double inv = 1.0 / std::sqrt(ss / d + static_cast<double>(c.rms_eps));
      for (int i = 0; i < d; ++i) y[static_cast<size_t>(s) * d + i] = x[static_cast<size_t>(s) * d + i] * inv * w[i];
    }
    return y;
  };
  auto rope = [&](std::vector<double>* x, int heads) {
    const int half = hd / 2;
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const double angle = s * std::pow(static_cast<double>(c.rope_theta), -2.0 * i / hd);
          double* v = x->data() + (static_cast<size_t>(s) * heads + h) * hd;
          const double a = v[i], b = v[i + half];
          v[i] = a * std::cos(angle) - b * std::sin(angle);
          v[i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
  };

  const std::string embed = llada ? "model.transformer.wte.weight" : "model.embed_tokens.weight";
  std::vector<double> x(static_cast<size_t>(S) * d);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < d; ++i) x[static_cast<size_t>(s) * d + i] = W(embed)[static_cast<size_t>(tokens[s]) * d + i];

  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = llada ? "model.transformer.blocks." + std::to_string(l) + "." : "model.layers." + std::to_string(l) + ".";
    const std::string a = llada ? p : p + "self_attn.";
    const std::vector<double> h = rmsnorm(x, W(p + (llada ? "attn_norm.weight" : "input_layernorm.weight")));
    const std::vector<float>* bq = llada ? nullptr : &W(a + "q_proj.bias");
    const std::vector<float>* bk = llada ? nullptr : &W(a + "k_proj.bias");
    const std::vector<float>* bv = llada ? nullptr : &W(a + "v_proj.bias");
    std::vector<double> q = linear(h, d, W(a + "q_proj.weight"), H * hd, bq);
    std::vector<double> k = linear(h, d, W(a + "k_proj.weight"), KV * hd, bk);
    const std::vector<double> v = linear(h, d, W(a + "v_proj.weight"), KV * hd, bv);
    rope(&q, H);
    rope(&k, KV);
    std::vector<double> att(static_cast<size_t>(S) * H * hd, 0.0);
    for (int head = 0; head < H; ++head) {
      const int kvh = head / (H / KV);
      for (int i = 0; i < S; ++i) {
        std::vector<double> sc(S);
        double mx = -1e300;
        for (int j = 0; j < S; ++j) {
          double dot = 0;
          for (int e = 0; e < hd; ++e)
            dot += q[(static_cast<size_t>(i) * H + head) * hd + e] * k[(static_cast<size_t>(j) * KV + kvh) * hd + e];
          sc[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& z : sc) sum += (z = std::exp(z - mx));
        for (int j = 0; j < S; ++j)
          for (int e = 0; e < hd; ++e)
            att[(static_cast<size_t>(i) * H + head) * hd + e] += sc[j] / sum * v[(static_cast<size_t>(j) * KV + kvh) * hd + e];
      }
    }
    const std::vector<double> o = linear(att, H * hd, W(a + (llada ? "attn_out.weight" : "o_proj.weight")), d, nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    const std::vector<double> h2 = rmsnorm(x, W(p + (llada ? "ff_norm.weight" : "post_attention_layernorm.weight")));
    const std::vector<double> g = linear(h2, d, W(p + (llada ? "ff_proj.weight" : "mlp.gate_proj.weight")), F, nullptr);
    const std::vector<double> u = linear(h2, d, W(p + (llada ? "up_proj.weight" : "mlp.up_proj.weight")), F, nullptr);
    std::vector<double> act(g.size());
    for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const std::vector<double> down = linear(act, F, W(p + (llada ? "ff_out.weight" : "mlp.down_proj.weight")), d, nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const std::vector<double> hf = rmsnorm(x, W(llada ? "model.transformer.ln_f.weight" : "model.norm.weight"));
  const std::string head_name = llada ? "model.transformer.ff_out.weight" : "lm_head.weight";
  const std::vector<float>& head = t.count(head_name) ? W(head_name) : W(embed);  // tied
  const std::vector<double> logits = linear(hf, d, head, V, nullptr);
  if (llada) return logits;
  std::vector<double> shifted(logits.size());
  for (int s = 0; s < S; ++s)
    for (int vv = 0; vv < V; ++vv)
      shifted[static_cast<size_t>(s) * V + vv] = logits[static_cast<size_t>(s == 0 ? 0 : s - 1) * V + vv];
  return shifted;
}

}  // namespace tediserve::engine::testing
