#include "engine/transformer.h"

#include "engine/vector_math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tediserve::engine {

extern "C" void openblas_set_num_threads(int);

KvBuffer::KvBuffer(const ModelConfig& config, int positions)
    : kv_heads_(config.n_kv_heads), head_dim_(config.head_dim), positions_(positions) {
  const size_t n = static_cast<size_t>(config.n_layers) * kv_heads_ * positions_ * head_dim_;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

namespace {

void RmsNorm(const float* x, const float* w, int rows, int d, float eps, float* y) {
  for (int r = 0; r < rows; ++r)
    vec::RmsNorm(x + static_cast<size_t>(r) * d, w, d, eps, y + static_cast<size_t>(r) * d);
}

// NeoX rotate-half RoPE on one head vector in place.
inline void Rope(float* v, int hd, const float* cos, const float* sin) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float a = v[i], b = v[i + half];
    v[i] = a * cos[i] - b * sin[i];
    v[i + half] = b * cos[i] + a * sin[i];
  }
}

// Appends rows [r0, r0+n) of a [rows x cols] row-major matrix, as fp32.
void AppendRows(const Matrix& m, int r0, int n, std::vector<float>* out) {
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(n) * m.cols);
  for (int r = 0; r < n; ++r) m.RowToFloat(r0 + r, 0, m.cols, out->data() + at + static_cast<size_t>(r) * m.cols);
}

// Columns [c0, c0+n) of a [rows x cols] matrix as a [rows x n] fp32 matrix.
std::vector<float> Columns(const Matrix& m, int c0, int n) {
  std::vector<float> out(static_cast<size_t>(m.rows) * n);
  for (int r = 0; r < m.rows; ++r) m.RowToFloat(r, c0, n, out.data() + static_cast<size_t>(r) * n);
  return out;
}

template <typename T>
void Grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

}  // namespace

const char* WeightLayoutName(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kAuto: return "auto";
    case WeightLayout::kPacked: return "packed";
    case WeightLayout::kMapped: return "mapped";
  }
  return "?";
}

StatusOr<std::unique_ptr<Transformer>> Transformer::Create(std::shared_ptr<const LoadedModel> model,
                                                           int tp_degree, WeightLayout layout) {
  const ModelConfig& c = model->config;
  if (tp_degree < 1) return InvalidArgument("tensor-parallel degree must be >= 1");
  if (c.n_heads % tp_degree != 0 || c.n_kv_heads % tp_degree != 0)
    return InvalidArgument("tensor-parallel degree " + std::to_string(tp_degree) +
                           " must divide the head count (" + std::to_string(c.n_heads) +
                           ") and the kv head count (" + std::to_string(c.n_kv_heads) + ")");
  if (c.mlp_hidden % tp_degree != 0)
    return InvalidArgument("tensor-parallel degree must divide the MLP width");
  // Parallelism comes from our shards; each shard's GEMMs run on its own core.
  openblas_set_num_threads(1);
  const bool packed = layout == WeightLayout::kPacked || (layout == WeightLayout::kAuto && PacksByDefault(c));
  return std::unique_ptr<Transformer>(new Transformer(std::move(model), tp_degree, packed));
}

Transformer::Transformer(std::shared_ptr<const LoadedModel> model, int tp, bool packed)
    : model_(std::move(model)), config_(model_->config), packed_(packed), pool_(tp) {
  const ModelConfig& c = config_;
  const ModelWeights& w = model_->weights;
  const int hd = c.head_dim;
  shards_.resize(tp);
  for (int s = 0; s < tp; ++s) {
    Shard& sh = shards_[s];
    sh.q_heads = c.n_heads / tp;
    sh.kv_heads = c.n_kv_heads / tp;
    sh.q_head0 = s * sh.q_heads;
    sh.kv_head0 = s * sh.kv_heads;
    sh.mlp = c.mlp_hidden / tp;
    const int vocab_per = (c.vocab_size + tp - 1) / tp;
    sh.vocab0 = std::min(c.vocab_size, s * vocab_per);
    sh.vocab = std::min(c.vocab_size, sh.vocab0 + vocab_per) - sh.vocab0;
    for (const LayerWeights& lw : w.layers) {
      Shard::Layer L;
      if (c.qkv_bias) {
        auto add = [&](const std::vector<float>& b, int h0, int n) {
          L.bqkv.insert(L.bqkv.end(), b.begin() + h0 * hd, b.begin() + (h0 + n) * hd);
        };
        add(lw.bq, sh.q_head0, sh.q_heads);
        add(lw.bk, sh.kv_head0, sh.kv_heads);
        add(lw.bv, sh.kv_head0, sh.kv_heads);
      }
      if (packed_) {
        AppendRows(lw.wq, sh.q_head0 * hd, sh.q_heads * hd, &L.wqkv);
        AppendRows(lw.wk, sh.kv_head0 * hd, sh.kv_heads * hd, &L.wqkv);
        AppendRows(lw.wv, sh.kv_head0 * hd, sh.kv_heads * hd, &L.wqkv);
        L.wo = Columns(lw.wo, sh.q_head0 * hd, sh.q_heads * hd);
        AppendRows(lw.w_gate, s * sh.mlp, sh.mlp, &L.wgu);
        AppendRows(lw.w_up, s * sh.mlp, sh.mlp, &L.wgu);
        L.wdown = Columns(lw.w_down, s * sh.mlp, sh.mlp);
        packed_bytes_ += (L.wqkv.size() + L.wo.size() + L.wgu.size() + L.wdown.size()) * sizeof(float);
      } else {
        const int d = c.d_model;
        L.q = {&lw.wq, sh.q_head0 * hd, sh.q_heads * hd, 0, d};
        L.k = {&lw.wk, sh.kv_head0 * hd, sh.kv_heads * hd, 0, d};
        L.v = {&lw.wv, sh.kv_head0 * hd, sh.kv_heads * hd, 0, d};
        L.o = {&lw.wo, 0, d, sh.q_head0 * hd, sh.q_heads * hd};
        L.gate = {&lw.w_gate, s * sh.mlp, sh.mlp, 0, d};
        L.up = {&lw.w_up, s * sh.mlp, sh.mlp, 0, d};
        L.down = {&lw.w_down, 0, d, s * sh.mlp, sh.mlp};
      }
      sh.layers.push_back(std::move(L));
    }
  }
  // The packed layout runs the LM head on fp32 weights too.
  if (packed_ && w.lm_head.ptr() == nullptr) {
    lm_head_f32_ = w.lm_head.ToFloat();
    packed_bytes_ += lm_head_f32_.size() * sizeof(float);
  }
  const int half = hd / 2;
  rope_cos_.resize(static_cast<size_t>(c.max_seq_len) * half);
  rope_sin_.resize(rope_cos_.size());
  for (int p = 0; p < c.max_seq_len; ++p)
    for (int i = 0; i < half; ++i) {
      const double inv = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / hd);
      rope_cos_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(p * inv));
      rope_sin_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(p * inv));
    }
}

ForwardStats Transformer::Forward(std::span<const SequenceInput> batch, std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int d = c.d_model;
  std::vector<int> row0(batch.size()), logit_row0(batch.size());
  int rows = 0, logit_rows = 0;
  ForwardStats stats;
  for (size_t i = 0; i < batch.size(); ++i) {
    row0[i] = rows;
    logit_row0[i] = logit_rows;
    const int n = batch[i].active_end - batch[i].active_begin;
    rows += n;
    logit_rows += batch[i].logits_end - batch[i].logits_begin;
    stats.attention_flops += 4.0 * n * batch[i].seq_len * c.head_dim * c.n_heads * c.n_layers;
  }
  stats.tokens = rows;
  const double per_token = 2.0 * d * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim +
                           2.0 * c.n_heads * c.head_dim * d + 2.0 * d * 3 * c.mlp_hidden;
  stats.gemm_flops = per_token * rows * c.n_layers + 2.0 * logit_rows * d * c.vocab_size;

  Grow(&x_, static_cast<size_t>(rows) * d);
  const ModelWeights& w = model_->weights;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    for (int p = in.active_begin; p < in.active_end; ++p)
      w.embed.RowToFloat(in.tokens[p], 0, d, x_.data() + static_cast<size_t>(row0[i] + p - in.active_begin) * d);
  }
  logits->resize(static_cast<size_t>(logit_rows) * c.vocab_size);
  pool_.Run([&](int s) { RunShard(s, batch, row0, rows, logit_row0, logit_rows, logits); });
  return stats;
}

void Transformer::RunShard(int s, std::span<const SequenceInput> batch, const std::vector<int>& row0,
                           int T, const std::vector<int>& logit_row0, int R,
                           std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const ModelWeights& w = model_->weights;
  Shard& sh = shards_[s];
  const int d = c.d_model, hd = c.head_dim, half = hd / 2;
  const int tp = pool_.size();
  const int nq = sh.q_heads * hd, nkv = sh.kv_heads * hd, nqkv = nq + 2 * nkv;
  const int group = c.n_heads / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int max_seq = 0, max_active = 0;
  for (const auto& in : batch) {
    max_seq = std::max(max_seq, in.seq_len);
    max_active = std::max(max_active, in.active_end - in.active_begin);
  }
  Grow(&sh.h, static_cast<size_t>(T) * d);
  Grow(&sh.qkv, static_cast<size_t>(T) * nqkv);
  Grow(&sh.attn, static_cast<size_t>(T) * nq);
  Grow(&sh.act, static_cast<size_t>(T) * 2 * sh.mlp);
  Grow(&sh.scores, static_cast<size_t>(max_active) * max_seq);
  if (tp > 1) Grow(&sh.partial, static_cast<size_t>(T) * d);
  float* x = x_.data();
  // Rows of the all-reduce this shard sums.
  const int rows_per = (T + tp - 1) / tp;
  const int r0 = std::min(T, s * rows_per), r1 = std::min(T, r0 + rows_per);

  // out = in * W^T accumulated into the residual stream: directly for one shard, through
  // the partial buffers and a row-split reduction for several. W is a packed fp32 [d x k]
  // matrix (packed layout) or a block of the model's matrix (mapped layout).
  auto project_into_residual = [&](const float* in, int ld_in, const float* wt, const WeightBlock& block, int k) {
    if (tp == 1) {
      if (wt != nullptr)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, d, k, 1.0f, in, ld_in, wt, k, 1.0f, x, d);
      else
        GemmBlock(T, in, ld_in, block, 1.0f, x, d, &sh.panel);
      return;
    }
    if (wt != nullptr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, d, k, 1.0f, in, ld_in, wt, k, 0.0f,
                  sh.partial.data(), d);
    else
      GemmBlock(T, in, ld_in, block, 0.0f, sh.partial.data(), d, &sh.panel);
    pool_.Sync();
    for (int o = 0; o < tp; ++o) {
      const float* p = shards_[o].partial.data();
      vec::Add(x + static_cast<size_t>(r0) * d, p + static_cast<size_t>(r0) * d, static_cast<long>(r1 - r0) * d);
    }
    pool_.Sync();
  };

  for (int l = 0; l < c.n_layers; ++l) {
    const Shard::Layer& L = sh.layers[l];
    const LayerWeights& lw = w.layers[l];
    RmsNorm(x, lw.attn_norm.data(), T, d, c.rms_eps, sh.h.data());
    if (packed_) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, nqkv, d, 1.0f, sh.h.data(), d,
                  L.wqkv.data(), d, 0.0f, sh.qkv.data(), nqkv);
    } else {
      GemmBlock(T, sh.h.data(), d, L.q, 0.0f, sh.qkv.data(), nqkv, &sh.panel);
      GemmBlock(T, sh.h.data(), d, L.k, 0.0f, sh.qkv.data() + nq, nqkv, &sh.panel);
      GemmBlock(T, sh.h.data(), d, L.v, 0.0f, sh.qkv.data() + nq + nkv, nqkv, &sh.panel);
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const SequenceInput& in = batch[i];
      for (int p = in.active_begin; p < in.active_end; ++p) {
        float* row = sh.qkv.data() + static_cast<size_t>(row0[i] + p - in.active_begin) * nqkv;
        if (!L.bqkv.empty())
          for (int j = 0; j < nqkv; ++j) row[j] += L.bqkv[j];
        const float* cs = rope_cos_.data() + static_cast<size_t>(p) * half;
        const float* sn = rope_sin_.data() + static_cast<size_t>(p) * half;
        for (int h = 0; h < sh.q_heads + sh.kv_heads; ++h) Rope(row + h * hd, hd, cs, sn);
        for (int h = 0; h < sh.kv_heads; ++h) {
          std::memcpy(in.kv->k(l, sh.kv_head0 + h) + static_cast<size_t>(p) * hd, row + nq + h * hd,
                      hd * sizeof(float));
          std::memcpy(in.kv->v(l, sh.kv_head0 + h) + static_cast<size_t>(p) * hd,
                      row + nq + nkv + h * hd, hd * sizeof(float));
        }
      }
      const int n = in.active_end - in.active_begin, S = in.seq_len;
      for (int h = 0; h < sh.q_heads; ++h) {
        const int kvh = (sh.q_head0 + h) / group;
        const float* q = sh.qkv.data() + static_cast<size_t>(row0[i]) * nqkv + h * hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, S, hd, scale, q, nqkv, in.kv->k(l, kvh),
                    hd, 0.0f, sh.scores.data(), S);
        for (int r = 0; r < n; ++r) vec::Softmax(sh.scores.data() + static_cast<size_t>(r) * S, S);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, S, 1.0f, sh.scores.data(), S,
                    in.kv->v(l, kvh), hd, 0.0f,
                    sh.attn.data() + static_cast<size_t>(row0[i]) * nq + h * hd, nq);
      }
    }
    project_into_residual(sh.attn.data(), nq, packed_ ? L.wo.data() : nullptr, L.o, nq);

    RmsNorm(x, lw.ffn_norm.data(), T, d, c.rms_eps, sh.h.data());
    const int m = sh.mlp;
    if (packed_) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, 2 * m, d, 1.0f, sh.h.data(), d,
                  L.wgu.data(), d, 0.0f, sh.act.data(), 2 * m);
    } else {
      GemmBlock(T, sh.h.data(), d, L.gate, 0.0f, sh.act.data(), 2 * m, &sh.panel);
      GemmBlock(T, sh.h.data(), d, L.up, 0.0f, sh.act.data() + m, 2 * m, &sh.panel);
    }
    for (int t = 0; t < T; ++t) {
      float* row = sh.act.data() + static_cast<size_t>(t) * 2 * m;
      vec::SiluMul(row, row + m, m);
    }
    project_into_residual(sh.act.data(), 2 * m, packed_ ? L.wdown.data() : nullptr, L.down, m);
  }

  // Final norm of the logit rows (each shard all of them; they are few), then this shard's
  // slice of the vocabulary.
  if (R == 0 || sh.vocab == 0) return;
  Grow(&sh.logits_h, static_cast<size_t>(R) * d);
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    const int n = in.logits_end - in.logits_begin;
    if (n <= 0) continue;
    RmsNorm(x + static_cast<size_t>(row0[i] + in.logits_begin - in.active_begin) * d,
            w.final_norm.data(), n, d, c.rms_eps,
            sh.logits_h.data() + static_cast<size_t>(logit_row0[i]) * d);
  }
  const float* head = packed_ ? (lm_head_f32_.empty() ? w.lm_head.ptr() : lm_head_f32_.data()) : nullptr;
  if (head != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, sh.vocab, d, 1.0f, sh.logits_h.data(), d,
                head + static_cast<size_t>(sh.vocab0) * d, d, 0.0f, logits->data() + sh.vocab0, c.vocab_size);
  } else {
    GemmBlock(R, sh.logits_h.data(), d, WeightBlock{&w.lm_head, sh.vocab0, sh.vocab, 0, d}, 0.0f,
              logits->data() + sh.vocab0, c.vocab_size, &sh.panel);
  }
}

void Transformer::GemmBlock(int M, const float* A, int lda, const WeightBlock& b, float beta, float* C, int ldc,
                            std::vector<float>* scratch) {
  if (M <= 0 || b.rows <= 0) return;
  const Matrix& m = *b.m;
  if (const float* f = m.ptr(); f != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, b.rows, b.cols, 1.0f, A, lda,
                f + static_cast<size_t>(b.r0) * m.cols + b.c0, m.cols, beta, C, ldc);
    return;
  }
  // Panel height: with few rows of A (cache steps) the converted panel should stay in the
  // core's L2; with many, sgemm packs all of A on every call, so panels must be tall enough
  // for that to be a small part of the work.
  const size_t target = M <= 64 ? (size_t{192} << 10) / sizeof(float) : (size_t{8} << 20) / sizeof(float);
  int panel = static_cast<int>(std::clamp<size_t>(target / static_cast<size_t>(b.cols), 16, 4096));
  panel = std::min(b.rows, panel / 16 * 16);
  Grow(scratch, static_cast<size_t>(panel) * b.cols);
  for (int r = 0; r < b.rows; r += panel) {
    const int n = std::min(panel, b.rows - r);
    for (int i = 0; i < n; ++i)
      m.RowToFloat(b.r0 + r + i, b.c0, b.cols, scratch->data() + static_cast<size_t>(i) * b.cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n, b.cols, 1.0f, A, lda, scratch->data(), b.cols, beta,
                C + r, ldc);
  }
}

std::vector<Transformer::GemmShape> Transformer::GemmShapesFor(const ModelConfig& c, int tp, int tokens,
                                                               int logit_rows) {
  const int hd = c.head_dim, nq = c.n_heads / tp * hd, nqkv = nq + 2 * (c.n_kv_heads / tp) * hd;
  const int mlp = c.mlp_hidden / tp;
  std::vector<GemmShape> shapes;
  for (int l = 0; l < c.n_layers; ++l) {
    shapes.push_back({tokens, nqkv, c.d_model});
    shapes.push_back({tokens, c.d_model, nq});
    shapes.push_back({tokens, 2 * mlp, c.d_model});
    shapes.push_back({tokens, c.d_model, mlp});
  }
  if (logit_rows > 0) shapes.push_back({logit_rows, (c.vocab_size + tp - 1) / tp, c.d_model});
  return shapes;
}

}  // namespace tediserve::engine
