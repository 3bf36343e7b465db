#include "engine/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "common/machine.h"

namespace tediserve::engine {

const char* StepKindName(StepKind kind) {
  return kind == StepKind::kRecompute ? "recompute" : "cache";
}

namespace {

// Range of sequence positions of block b: [lo, hi).
std::pair<int, int> BlockRange(const DecodeState& s, int b) {
  const int lo = s.prompt_length() + b * s.block_size();
  return {lo, std::min(lo + s.block_size(), s.prompt_length() + s.gen_length())};
}

}  // namespace

int DecodeState::masked_in_block() const {
  if (done_) return 0;
  auto [lo, hi] = BlockRange(*this, block_);
  return static_cast<int>(std::count(tokens_.begin() + lo, tokens_.begin() + hi, mask_id_));
}

namespace {

// Summary of `v` (sorted in place).
ConfidenceSummary Summarise(std::vector<float>* v) {
  ConfidenceSummary s;
  s.count = static_cast<int>(v->size());
  if (v->empty()) return s;
  std::sort(v->begin(), v->end());
  auto q = [&](double f) {  // linear interpolation, as numpy's default
    const double pos = f * (v->size() - 1);
    const size_t i = static_cast<size_t>(pos);
    const double frac = pos - i;
    return static_cast<float>(i + 1 < v->size() ? (*v)[i] * (1 - frac) + (*v)[i + 1] * frac : (*v)[i]);
  };
  s.min = v->front();
  s.q1 = q(0.25);
  s.median = q(0.5);
  s.q3 = q(0.75);
  double sum = 0;
  for (float x : *v) sum += x;
  s.mean = static_cast<float>(sum / v->size());
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<DiffusionEngine>> DiffusionEngine::Create(
    std::shared_ptr<const LoadedModel> model, int tp_degree, WeightLayout layout) {
  ASSIGN_OR_RETURN(auto t, Transformer::Create(std::move(model), tp_degree, layout));
  return std::unique_ptr<DiffusionEngine>(new DiffusionEngine(std::move(t)));
}

StatusOr<std::unique_ptr<DecodeState>> DiffusionEngine::NewRequest(
    int64_t id, const std::vector<int32_t>& prompt, const DecodeOptions& o) const {
  const ModelConfig& c = config();
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size || prompt[i] == c.mask_token_id)
      return InvalidArgument("prompt token " + std::to_string(i) + " has id " + std::to_string(prompt[i]) +
                             ", not a valid non-mask token of a " + std::to_string(c.vocab_size) +
                             "-token vocabulary");
  if (o.gen_length <= 0) return InvalidArgument("gen length must be > 0, got " + std::to_string(o.gen_length));
  if (o.block_size <= 0) return InvalidArgument("block size must be > 0, got " + std::to_string(o.block_size));
  if (o.use_cache && o.gen_length % o.block_size != 0)
    return InvalidArgument("with the KV cache the gen length (" + std::to_string(o.gen_length) +
                           ") must be a multiple of the block size (" + std::to_string(o.block_size) + ")");
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    return InvalidArgument("temperature must be >= 0");
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.gen_length;
  if (total > c.max_seq_len)
    return OutOfRange("prompt (" + std::to_string(prompt.size()) + " tokens) + gen length (" +
                      std::to_string(o.gen_length) + ") = " + std::to_string(total) +
                      " tokens exceeds the model's context of " + std::to_string(c.max_seq_len));
  // The request's KV buffer (fp32 K and V of every position and layer) is allocated here:
  // a context the machine cannot hold is refused instead of failing in the allocator.
  const double kv_bytes = 2.0 * sizeof(float) * c.n_layers * c.n_kv_heads * c.head_dim * static_cast<double>(total);
  if (kv_bytes > static_cast<double>(UsableMemoryBytes()))
    return ResourceExhausted("prompt + gen length of " + std::to_string(total) + " tokens needs a " +
                             FormatBytes(static_cast<uint64_t>(kv_bytes)) + " KV buffer, more than the " +
                             FormatBytes(UsableMemoryBytes()) + " this process can use");
  auto s = std::make_unique<DecodeState>();
  s->id_ = id;
  s->prompt_length_ = static_cast<int>(prompt.size());
  s->options_ = o;
  s->tokens_ = prompt;
  s->tokens_.resize(total, c.mask_token_id);
  s->masked_remaining_ = o.gen_length;
  s->mask_id_ = c.mask_token_id;
  s->kv_ = KvBuffer(c, static_cast<int>(total));
  s->rng_.seed(o.seed ^ (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL));
  return s;
}

StatusOr<std::unique_ptr<DecodeState>> DiffusionEngine::ResumeRequest(int64_t id, const std::vector<int32_t>& prompt,
                                                                      const DecodeOptions& o,
                                                                      const std::vector<int32_t>& output,
                                                                      int steps) const {
  ASSIGN_OR_RETURN(auto s, NewRequest(id, prompt, o));
  const ModelConfig& c = config();
  if (static_cast<int>(output.size()) != o.gen_length)
    return InvalidArgument("resumed output has " + std::to_string(output.size()) + " positions, the gen length is " +
                           std::to_string(o.gen_length));
  if (steps < 0) return InvalidArgument("resumed step count must be >= 0, got " + std::to_string(steps));
  int masked = 0;
  for (size_t i = 0; i < output.size(); ++i) {
    if (output[i] < 0 || output[i] >= c.vocab_size)
      return InvalidArgument("resumed output position " + std::to_string(i) + " has id " + std::to_string(output[i]) +
                             ", outside the " + std::to_string(c.vocab_size) + "-token vocabulary");
    masked += output[i] == c.mask_token_id;
  }
  const int blocks = s->num_blocks();
  int block = blocks;  // the first block with a masked position
  for (int b = 0; b < blocks && block == blocks; ++b) {
    const int lo = b * o.block_size, hi = std::min(lo + o.block_size, o.gen_length);
    for (int p = lo; p < hi; ++p)
      if (output[p] == c.mask_token_id) block = b;
  }
  for (int p = std::min((block + 1) * o.block_size, o.gen_length); p < o.gen_length; ++p)
    if (output[p] != c.mask_token_id)
      return InvalidArgument("resumed output position " + std::to_string(p) + " is decoded but lies after block " +
                             std::to_string(block) + ", which still has masked positions");
  std::copy(output.begin(), output.end(), s->tokens_.begin() + s->prompt_length_);
  s->masked_remaining_ = masked;
  s->block_ = block;
  s->steps_ = steps;
  s->steps_in_block_ = 0;  // no KV cache here yet: the next step recomputes
  s->done_ = block >= blocks;
  return s;
}

int DecodeState::next_step_tokens() const {
  if (next_step_kind() == StepKind::kRecompute) return static_cast<int>(tokens_.size());
  auto [lo, hi] = BlockRange(*this, block_);
  return hi - lo;
}

Status DiffusionEngine::Step(std::span<const StepRequest> batch, std::vector<StepResult>* results,
                             BatchStats* stats) {
  const ModelConfig& c = config();
  const int shift = c.shift_logits ? 1 : 0;
  std::unordered_set<const DecodeState*> seen;
  std::vector<SequenceInput> inputs(batch.size());
  std::vector<int> logit_row0(batch.size());
  int logit_rows = 0;
  BatchStats bs;
  for (size_t i = 0; i < batch.size(); ++i) {
    DecodeState* s = batch[i].state;
    const float th = batch[i].threshold;
    if (s == nullptr) return InvalidArgument("batch entry " + std::to_string(i) + " has no request");
    if (s->done_) return FailedPrecondition("request " + std::to_string(s->id_) + " is already done");
    if (!(th > 0.0f && th <= 1.0f))
      return InvalidArgument("threshold must be in (0, 1], got " + std::to_string(th));
    if (!seen.insert(s).second)
      return InvalidArgument("request " + std::to_string(s->id_) + " appears twice in one batch");
    auto [lo, hi] = BlockRange(*s, s->block_);
    const int S = static_cast<int>(s->tokens_.size());
    SequenceInput& in = inputs[i];
    in.tokens = s->tokens_.data();
    in.seq_len = S;
    in.kv = &s->kv_;
    if (s->next_step_kind() == StepKind::kRecompute) {
      in.active_begin = 0;
      in.active_end = S;
      // The whole output's logits: the block decodes, the rest feeds the statistics.
      in.logits_begin = s->prompt_length_ - shift;
      in.logits_end = S - shift;
      ++bs.recompute_requests;
    } else {
      in.active_begin = lo - shift;  // Dream reads the block's logits from the row before
      in.active_end = hi;
      in.logits_begin = lo - shift;
      in.logits_end = hi - shift;
      ++bs.cache_requests;
    }
    logit_row0[i] = logit_rows;
    logit_rows += in.logits_end - in.logits_begin;
  }
  ForwardStats fs = transformer_->Forward(inputs, &logits_);
  bs.tokens = fs.tokens;
  bs.gemm_flops = fs.gemm_flops;
  bs.attention_flops = fs.attention_flops;
  if (stats) *stats = bs;

  const int V = c.vocab_size;
  const int32_t mask = c.mask_token_id;
  results->resize(batch.size());
  std::vector<float> block_conf, out_conf;
  for (size_t i = 0; i < batch.size(); ++i) {
    DecodeState& s = *batch[i].state;
    const SequenceInput& in = inputs[i];
    StepResult& r = (*results)[i];
    r = StepResult();
    r.id = s.id_;
    r.kind = s.next_step_kind();
    r.block = s.block_;
    r.threshold = batch[i].threshold;
    auto [lo, hi] = BlockRange(s, s.block_);
    // Confidence and argmax of every masked position we have logits for.
    const int p0 = in.logits_begin + shift, p1 = in.logits_end + shift;
    struct Cand {
      int pos;
      int32_t token;
      float conf;
    };
    std::vector<Cand> block_cands;
    block_conf.clear();
    out_conf.clear();
    for (int p = p0; p < p1; ++p) {
      if (s.tokens_[p] != mask) continue;
      const float* l = logits_.data() + static_cast<size_t>(logit_row0[i] + p - p0) * V;
      // The mask token is not an answer: it is left out of the argmax and the softmax, so
      // every unmasked position gets a real token and every step makes progress.
      int best = mask == 0 ? 1 : 0;
      float lmax = l[best];
      for (int v = 0; v < V; ++v)
        if (v != mask && l[v] > lmax) {
          lmax = l[v];
          best = v;
        }
      double sum = 0;
      for (int v = 0; v < V; ++v)
        if (v != mask) sum += std::exp(static_cast<double>(l[v] - lmax));
      int32_t tok = best;
      float conf = static_cast<float>(1.0 / sum);
      if (s.options_.temperature > 0.0f) {
        std::uniform_real_distribution<double> u(1e-12, 1.0);
        double bestg = -1e300;
        for (int v = 0; v < V; ++v) {
          if (v == mask) continue;
          const double g = l[v] - s.options_.temperature * std::log(-std::log(u(s.rng_)));
          if (g > bestg) {
            bestg = g;
            tok = v;
          }
        }
        conf = static_cast<float>(std::exp(static_cast<double>(l[tok] - lmax)) / sum);
      }
      out_conf.push_back(conf);
      if (p >= lo && p < hi) {
        block_cands.push_back({p, tok, conf});
        block_conf.push_back(conf);
      }
    }
    for (const Cand& cd : block_cands)
      for (size_t k = 0; k < kCandidateThresholds.size(); ++k)
        if (cd.conf >= kCandidateThresholds[k]) ++r.stats.block_above[k];
    r.stats.block = Summarise(&block_conf);
    r.stats.output = Summarise(&out_conf);

    // Unmask: every candidate at or above the threshold, else the single most confident.
    bool any = false;
    for (const Cand& cd : block_cands)
      if (cd.conf >= batch[i].threshold) {
        s.tokens_[cd.pos] = cd.token;
        r.unmasked.emplace_back(cd.pos - s.prompt_length_, cd.token);
        any = true;
      }
    if (!any && !block_cands.empty()) {
      const Cand* best = &block_cands[0];
      for (const Cand& cd : block_cands)
        if (cd.conf > best->conf) best = &cd;
      s.tokens_[best->pos] = best->token;
      r.unmasked.emplace_back(best->pos - s.prompt_length_, best->token);
    }
    s.masked_remaining_ -= static_cast<int>(r.unmasked.size());
    ++s.steps_;
    ++s.steps_in_block_;
    if (static_cast<int>(r.unmasked.size()) == static_cast<int>(block_cands.size())) {
      r.block_done = true;
      // Text ends at the first EOS, so once a finished block holds one nothing after it can
      // change the answer.
      const bool has_eos = std::any_of(s.tokens_.begin() + lo, s.tokens_.begin() + hi,
                                       [&c](int32_t t) { return c.IsEos(t); });
      ++s.block_;
      s.steps_in_block_ = 0;
      if (s.block_ >= s.num_blocks()) {
        s.done_ = true;
      } else if (has_eos && s.options_.eos_early_stop) {
        for (size_t p = hi; p < s.tokens_.size(); ++p) s.tokens_[p] = c.eos_token_id;
        s.masked_remaining_ = 0;
        s.done_ = true;
      }
    }
    r.request_done = s.done_;
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> DiffusionEngine::FullLogits(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = config();
  if (tokens.empty()) return InvalidArgument("no tokens");
  if (static_cast<int>(tokens.size()) > c.max_seq_len) return OutOfRange("longer than the context");
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(t));
  const int S = static_cast<int>(tokens.size());
  KvBuffer kv(c, S);
  SequenceInput in{tokens.data(), S, 0, S, &kv, 0, S};
  std::vector<float> hidden_logits;
  transformer_->Forward(std::span<const SequenceInput>(&in, 1), &hidden_logits);
  if (!c.shift_logits) return hidden_logits;
  // Shifted: position p is predicted from hidden row p-1 (row 0 from itself).
  const int V = c.vocab_size;
  std::vector<float> out(hidden_logits.size());
  std::memcpy(out.data(), hidden_logits.data(), V * sizeof(float));
  std::memcpy(out.data() + V, hidden_logits.data(), static_cast<size_t>(S - 1) * V * sizeof(float));
  return out;
}

}  // namespace tediserve::engine
