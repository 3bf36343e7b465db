#include "engine/model_config.h"

#include <filesystem>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"
#include "common/machine.h"

namespace tediserve::engine {

namespace {

using json = nlohmann::json;

// Typed access to config.json keys. A key whose value is null counts as absent (Hugging Face
// writes null for "not set").
class ConfigKeys {
 public:
  explicit ConfigKeys(const json& j) : j_(j) {}

  bool Has(const char* key) const {
    const auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

  Status Int(const char* key, int* out) const {
    if (!Has(key)) return InvalidArgument(std::string("missing required key '") + key + "'");
    return ToInt(key, j_.at(key), out);
  }
  Status Int(const char* key, int* out, int fallback) const {
    if (!Has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    return ToInt(key, j_.at(key), out);
  }
  // Token ids: Hugging Face allows a list for eos_token_id; the first entry is the one the
  // model emits to end an answer.
  Status TokenId(const char* key, int32_t* out, int32_t fallback) const {
    if (!Has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    const json& v = j_.at(key);
    if (v.is_array()) {
      if (v.empty()) return InvalidArgument(std::string("key '") + key + "' is an empty list");
      return ToInt(key, v[0], out);
    }
    return ToInt(key, v, out);
  }
  // Every id of a token-id key that may be an int or a list (eos_token_id); `fallback` when
  // absent.
  Status TokenIds(const char* key, std::vector<int32_t>* out, int32_t fallback) const {
    out->clear();
    if (!Has(key)) {
      out->push_back(fallback);
      return Status::Ok();
    }
    const json& v = j_.at(key);
    if (!v.is_array()) {
      int id = 0;
      RETURN_IF_ERROR(ToInt(key, v, &id));
      out->push_back(id);
      return Status::Ok();
    }
    if (v.empty()) return InvalidArgument(std::string("key '") + key + "' is an empty list");
    if (v.size() > 64) return InvalidArgument(std::string("key '") + key + "' lists more than 64 ids");
    for (const json& e : v) {
      int id = 0;
      RETURN_IF_ERROR(ToInt(key, e, &id));
      if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
    }
    return Status::Ok();
  }
  // A string key that, when present, must equal one of `allowed`; anything else is a
  // feature the engine does not implement.
  Status OneOf(const char* key, std::initializer_list<const char*> allowed) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_string()) return WrongType(key, "a string", v);
    std::string list;
    for (const char* a : allowed) {
      if (v.get_ref<const std::string&>() == a) return Status::Ok();
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    return Unimplemented(std::string("key '") + key + "' = " + JsonSnippet(v) +
                         " is not supported (supported: " + list + ")");
  }
  // A boolean key that, when present, must have the value the engine implements.
  Status MustBe(const char* key, bool want) const {
    bool v = want;
    RETURN_IF_ERROR(Bool(key, &v, want));
    if (v != want) {
      return Unimplemented(std::string("key '") + key + "' = " + (v ? "true" : "false") +
                           " is not supported (the engine implements " + (want ? "true" : "false") + ")");
    }
    return Status::Ok();
  }
  // A key that, when present, must be null (an optional feature left off).
  Status MustBeNull(const char* key) const {
    if (!Has(key)) return Status::Ok();
    return Unimplemented(std::string("key '") + key + "' = " + JsonSnippet(j_.at(key)) +
                         " is not supported (only null)");
  }
  Status Float(const char* key, float* out, float fallback) const {
    if (!Has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    const json& v = j_.at(key);
    if (!v.is_number()) return WrongType(key, "a number", v);
    // A double beyond float's range does not convert (undefined behaviour); bound it first.
    ASSIGN_OR_RETURN(const double d, JsonNumber(v, std::string("key '") + key + "'",
                                                -std::numeric_limits<float>::max(),
                                                std::numeric_limits<float>::max()));
    *out = static_cast<float>(d);
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out, bool fallback) const {
    if (!Has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    const json& v = j_.at(key);
    if (!v.is_boolean()) return WrongType(key, "true or false", v);
    *out = v.get<bool>();
    return Status::Ok();
  }

 private:
  static Status WrongType(const char* key, const char* want, const json& v) {
    return InvalidArgument(std::string("key '") + key + "' must be " + want + ", got " +
                           JsonSnippet(v));
  }
  static Status ToInt(const char* key, const json& v, int* out) {
    if (!v.is_number_integer()) return WrongType(key, "an integer", v);
    // Compare as int64 so both signed and unsigned JSON numbers are range-checked.
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return InvalidArgument(std::string("key '") + key + "' = " + JsonSnippet(v) + " is too large");
    }
    const int64_t x = v.get<int64_t>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
      return InvalidArgument(std::string("key '") + key + "' = " + JsonSnippet(v) + " is out of range");
    }
    *out = static_cast<int>(x);
    return Status::Ok();
  }

  const json& j_;
};

constexpr const char* kSupported = " (supported: LLaDA, Dream)";

StatusOr<Architecture> DetectArchitecture(const json& j) {
  const auto arch_it = j.find("architectures");
  if (arch_it != j.end() && !arch_it->is_null()) {
    if (!arch_it->is_array() || arch_it->empty() || !(*arch_it)[0].is_string()) {
      return InvalidArgument("key 'architectures' must be a non-empty list of strings, got " +
                             JsonSnippet(*arch_it));
    }
    const std::string name = (*arch_it)[0].get<std::string>();
    if (name == "LLaDAModelLM" || name == "LLaDAModel") return Architecture::kLLaDA;
    if (name == "DreamModel") return Architecture::kDream;
    return InvalidArgument("unknown architecture '" + SanitizeUtf8(name.substr(0, 80)) + "'" +
                           kSupported);
  }
  const auto type_it = j.find("model_type");
  if (type_it != j.end() && type_it->is_string()) {
    const std::string type = type_it->get<std::string>();
    if (type == "llada") return Architecture::kLLaDA;
    if (type == "Dream" || type == "dream") return Architecture::kDream;
    return InvalidArgument("unknown architecture '" + SanitizeUtf8(type.substr(0, 80)) + "'" +
                           kSupported);
  }
  return InvalidArgument(std::string("neither 'architectures' nor 'model_type' says which "
                                     "architecture this is") + kSupported);
}

// The ids a config.json gives for end of text, beginning of text and padding.
Status ParseSpecialIds(const ConfigKeys& keys, int32_t eos_default, ModelConfig* c) {
  RETURN_IF_ERROR(keys.TokenIds("eos_token_id", &c->eos_token_ids, eos_default));
  c->eos_token_id = c->eos_token_ids.front();
  RETURN_IF_ERROR(keys.TokenId("bos_token_id", &c->bos_token_id, -1));
  RETURN_IF_ERROR(keys.TokenId("pad_token_id", &c->pad_token_id, -1));
  return Status::Ok();
}

Status ParseLLaDA(const ConfigKeys& keys, ModelConfig* c) {
  RETURN_IF_ERROR(keys.Int("d_model", &c->d_model));
  RETURN_IF_ERROR(keys.Int("n_heads", &c->n_heads));
  RETURN_IF_ERROR(keys.Int("n_kv_heads", &c->n_kv_heads, c->n_heads));
  RETURN_IF_ERROR(keys.Int("n_layers", &c->n_layers));
  RETURN_IF_ERROR(keys.Int("mlp_hidden_size", &c->mlp_hidden));
  // embedding_size is the padded row count of wte / ff_out; vocab_size is the tokenizer's.
  if (keys.Has("embedding_size")) {
    RETURN_IF_ERROR(keys.Int("embedding_size", &c->vocab_size));
  } else if (keys.Has("vocab_size")) {
    RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  } else {
    return InvalidArgument("missing required key 'embedding_size' or 'vocab_size'");
  }
  RETURN_IF_ERROR(keys.Int("max_sequence_length", &c->max_seq_len));
  RETURN_IF_ERROR(keys.Float("rope_theta", &c->rope_theta, 500000.0f));
  RETURN_IF_ERROR(keys.Float("rms_norm_eps", &c->rms_eps, 1e-5f));
  RETURN_IF_ERROR(keys.TokenId("mask_token_id", &c->mask_token_id, 126336));
  RETURN_IF_ERROR(ParseSpecialIds(keys, 126081, c));
  RETURN_IF_ERROR(keys.Bool("weight_tying", &c->tie_embeddings, false));
  bool include_bias = false;
  RETURN_IF_ERROR(keys.Bool("include_bias", &include_bias, false));
  if (include_bias) return Unimplemented("LLaDA with include_bias=true is not supported");
  // The published LLaDA-8B layout (an OLMo "llama" block: separate q/k/v, SiLU(ff_proj) *
  // up_proj, RMSNorm with weights, RoPE); the OLMo options that change the network are
  // refused by name rather than computed differently.
  RETURN_IF_ERROR(keys.OneOf("activation_type", {"silu"}));
  RETURN_IF_ERROR(keys.OneOf("block_type", {"llama"}));
  RETURN_IF_ERROR(keys.OneOf("layer_norm_type", {"rms"}));
  RETURN_IF_ERROR(keys.MustBe("layer_norm_with_affine", true));
  RETURN_IF_ERROR(keys.MustBe("bias_for_layer_norm", false));
  RETURN_IF_ERROR(keys.MustBe("include_qkv_bias", false));
  RETURN_IF_ERROR(keys.MustBe("rope", true));
  RETURN_IF_ERROR(keys.MustBe("alibi", false));
  RETURN_IF_ERROR(keys.MustBe("attention_layer_norm", false));
  RETURN_IF_ERROR(keys.MustBe("input_emb_norm", false));
  RETURN_IF_ERROR(keys.MustBe("scale_logits", false));
  RETURN_IF_ERROR(keys.MustBeNull("clip_qkv"));
  RETURN_IF_ERROR(keys.MustBeNull("multi_query_attention"));
  c->qkv_bias = false;
  c->shift_logits = false;
  return Status::Ok();
}

Status ParseDream(const json& j, const ConfigKeys& keys, ModelConfig* c) {
  RETURN_IF_ERROR(keys.Int("hidden_size", &c->d_model));
  RETURN_IF_ERROR(keys.Int("num_attention_heads", &c->n_heads));
  RETURN_IF_ERROR(keys.Int("num_key_value_heads", &c->n_kv_heads, c->n_heads));
  RETURN_IF_ERROR(keys.Int("num_hidden_layers", &c->n_layers));
  RETURN_IF_ERROR(keys.Int("intermediate_size", &c->mlp_hidden));
  RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(keys.Int("max_position_embeddings", &c->max_seq_len));
  RETURN_IF_ERROR(keys.Float("rope_theta", &c->rope_theta, 1e6f));
  RETURN_IF_ERROR(keys.Float("rms_norm_eps", &c->rms_eps, 1e-6f));
  RETURN_IF_ERROR(keys.TokenId("mask_token_id", &c->mask_token_id, 151666));
  RETURN_IF_ERROR(ParseSpecialIds(keys, 151643, c));
  RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c->tie_embeddings, false));
  // The forward pass implements plain RoPE over full attention; refuse rather than compute
  // something else silently.
  if (keys.Has("rope_scaling")) {
    return Unimplemented("Dream with rope_scaling " + JsonSnippet(j.at("rope_scaling")) +
                         " is not supported");
  }
  bool sliding = false;
  RETURN_IF_ERROR(keys.Bool("use_sliding_window", &sliding, false));
  if (sliding) return Unimplemented("Dream with use_sliding_window=true is not supported");
  RETURN_IF_ERROR(keys.OneOf("hidden_act", {"silu"}));
  if (keys.Has("head_dim") && c->n_heads > 0) {
    int head_dim = 0;
    RETURN_IF_ERROR(keys.Int("head_dim", &head_dim));
    if (head_dim != c->d_model / c->n_heads) {
      return Unimplemented("key 'head_dim' = " + std::to_string(head_dim) +
                           " is not hidden_size / num_attention_heads (" +
                           std::to_string(c->d_model / c->n_heads) + "); not supported");
    }
  }
  c->qkv_bias = true;
  c->shift_logits = true;
  return Status::Ok();
}

}  // namespace

const char* ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLLaDA: return "LLaDA";
    case Architecture::kDream: return "Dream";
  }
  return "?";
}

StatusOr<ModelConfig> ModelConfig::FromJson(const std::string& json_text, const std::string& where) {
  ASSIGN_OR_RETURN(const json j, ParseJson(json_text, where));
  RETURN_IF_ERROR(CheckNoDuplicateKeys(json_text, where));
  return FromJsonValue(j);
}

StatusOr<ModelConfig> ModelConfig::FromJsonValue(const json& j) {
  if (!j.is_object()) return InvalidArgument("not a JSON object");

  ModelConfig c;
  ASSIGN_OR_RETURN(c.arch, DetectArchitecture(j));
  const ConfigKeys keys(j);
  const Status parsed = c.arch == Architecture::kLLaDA ? ParseLLaDA(keys, &c)
                                                       : ParseDream(j, keys, &c);
  RETURN_IF_ERROR(parsed.WithContext(ArchitectureName(c.arch)));
  if (c.n_heads > 0) c.head_dim = c.d_model / c.n_heads;
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Status ModelConfig::Validate() const {
  const bool llada = arch == Architecture::kLLaDA;
  // Named by the config.json key of the architecture, so the message points at the file.
  struct Dim {
    const char* name;
    int value, lo, hi;
  };
  const Dim dims[] = {
      {llada ? "d_model" : "hidden_size", d_model, 1, kMaxDModel},
      {llada ? "n_layers" : "num_hidden_layers", n_layers, 1, kMaxLayers},
      {llada ? "n_heads" : "num_attention_heads", n_heads, 1, kMaxHeads},
      {llada ? "n_kv_heads" : "num_key_value_heads", n_kv_heads, 1, kMaxHeads},
      {"head_dim", head_dim, 1, kMaxDModel},
      {llada ? "mlp_hidden_size" : "intermediate_size", mlp_hidden, 1, kMaxMlpHidden},
      // Mask, eos and one token to write: a 2-token vocabulary cannot say anything (and
      // random prompts drawn from it would never find a token).
      {"vocab_size", vocab_size, 3, kMaxVocab},
      // One prompt token and one output token.
      {llada ? "max_sequence_length" : "max_position_embeddings", max_seq_len, 2, kMaxSeqLen},
  };
  for (const Dim& dim : dims) {
    if (dim.value <= 0) {
      return InvalidArgument(std::string(dim.name) + " must be positive, got " +
                             std::to_string(dim.value));
    }
    if (dim.value < dim.lo || dim.value > dim.hi) {
      return InvalidArgument(std::string(dim.name) + " = " + std::to_string(dim.value) +
                             " is outside the supported range [" + std::to_string(dim.lo) +
                             ", " + std::to_string(dim.hi) + "]");
    }
  }
  auto str = [](int v) { return std::to_string(v); };
  auto num = [](float v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
    return std::string(buf);
  };
  if (d_model % n_heads != 0) {
    return InvalidArgument("n_heads (" + str(n_heads) + ") does not divide d_model (" +
                           str(d_model) + ")");
  }
  if (head_dim != d_model / n_heads) {
    return InvalidArgument("head_dim (" + str(head_dim) + ") is not d_model / n_heads (" +
                           str(d_model / n_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    return InvalidArgument("head_dim (" + str(head_dim) + ") must be even for RoPE");
  }
  if (n_heads % n_kv_heads != 0) {
    return InvalidArgument("n_kv_heads (" + str(n_kv_heads) + ") does not divide n_heads (" +
                           str(n_heads) + ")");
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    return InvalidArgument("rope_theta must be positive and finite, got " + num(rope_theta));
  }
  if (!(rms_eps > 0) || !std::isfinite(rms_eps)) {
    return InvalidArgument("rms_norm_eps must be positive and finite, got " + num(rms_eps));
  }
  if (mask_token_id < 0 || mask_token_id >= vocab_size) {
    return InvalidArgument("mask_token_id " + str(mask_token_id) +
                           " is outside the vocabulary [0, " + str(vocab_size) + ")");
  }
  if (eos_token_id < 0 || eos_token_id >= vocab_size) {
    return InvalidArgument("eos_token_id " + str(eos_token_id) +
                           " is outside the vocabulary [0, " + str(vocab_size) + ")");
  }
  if (mask_token_id == eos_token_id) {
    return InvalidArgument("mask_token_id and eos_token_id are both " + str(mask_token_id));
  }
  for (const int32_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("eos_token_id " + str(id) + " is outside the vocabulary [0, " +
                             str(vocab_size) + ")");
    }
    if (id == mask_token_id) {
      return InvalidArgument("mask_token_id " + str(id) + " is also an eos_token_id");
    }
  }
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos_token_id", bos_token_id},
                                 std::pair<const char*, int32_t>{"pad_token_id", pad_token_id}}) {
    if (id != -1 && (id < 0 || id >= vocab_size)) {
      return InvalidArgument(std::string(name) + " " + str(id) + " is outside the vocabulary [0, " +
                             str(vocab_size) + ")");
    }
  }
  return Status::Ok();
}

bool ModelConfig::IsEos(int32_t id) const {
  return id == eos_token_id || std::find(eos_token_ids.begin(), eos_token_ids.end(), id) != eos_token_ids.end();
}

uint64_t ModelMemory::total() const {
  uint64_t t = 0;
  for (const uint64_t part : {weights, packed, rope, kv_cache}) {
    if (__builtin_add_overflow(t, part, &t)) return UINT64_MAX;
  }
  return t;
}

uint64_t LayerWeightBytesFp32(const ModelConfig& c) {
  using u128 = unsigned __int128;
  const u128 d = static_cast<u128>(std::max(c.d_model, 0));
  const u128 q = static_cast<u128>(std::max(c.n_heads, 0)) * std::max(c.head_dim, 0);
  const u128 kv = static_cast<u128>(std::max(c.n_kv_heads, 0)) * std::max(c.head_dim, 0);
  const u128 mlp = static_cast<u128>(std::max(c.mlp_hidden, 0));
  const u128 layers = static_cast<u128>(std::max(c.n_layers, 0));
  const u128 bytes = layers * ((q + 2 * kv) * d + d * q + 3 * mlp * d) * sizeof(float);
  return bytes > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(bytes);
}

bool PacksByDefault(const ModelConfig& c) { return LayerWeightBytesFp32(c) <= kPackedWeightLimitBytes; }

ModelMemory EstimateModelMemory(const ModelConfig& c, uint64_t stored_bytes) {
  // Products of up to four bounded ints, in 128 bits so nothing wraps; saturated at the end.
  using u128 = unsigned __int128;
  auto sat = [](u128 v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); };
  const u128 d = static_cast<u128>(std::max(c.d_model, 0));
  const u128 q = static_cast<u128>(std::max(c.n_heads, 0)) * std::max(c.head_dim, 0);
  const u128 kv = static_cast<u128>(std::max(c.n_kv_heads, 0)) * std::max(c.head_dim, 0);
  const u128 mlp = static_cast<u128>(std::max(c.mlp_hidden, 0));
  const u128 layers = static_cast<u128>(std::max(c.n_layers, 0));
  const u128 vocab = static_cast<u128>(std::max(c.vocab_size, 0));
  const u128 seq = static_cast<u128>(std::max(c.max_seq_len, 0));
  const u128 kv_seq = static_cast<u128>(std::min(std::max(c.max_seq_len, 0), kKvEstimateTokens));
  const u128 per_layer = 2 * d + (q + 2 * kv) * d + (c.qkv_bias ? q + 2 * kv : 0) + d * q +
                         3 * mlp * d;
  const u128 head = c.tie_embeddings ? 0 : vocab * d;
  const u128 f = sizeof(float);
  ModelMemory m;
  m.weights = stored_bytes != 0 ? stored_bytes : sat((vocab * d + head + d + layers * per_layer) * f);
  // Packed: the fused per-shard layer matrices and an fp32 LM head.
  if (PacksByDefault(c)) m.packed = sat(static_cast<u128>(LayerWeightBytesFp32(c)) + vocab * d * f);
  m.rope = sat(seq * static_cast<u128>(std::max(c.head_dim, 0)) * f);  // cos + sin, hd/2 each
  m.kv_cache = sat(2 * layers * kv * kv_seq * f);
  return m;
}

Status CheckModelFitsMemory(const ModelConfig& config, uint64_t available, uint64_t stored_bytes) {
  if (available == 0) available = UsableMemoryBytes();
  const ModelMemory m = EstimateModelMemory(config, stored_bytes);
  if (m.total() <= available) return Status::Ok();
  // Bad input (exit 2): the config describes a model this machine cannot hold.
  return InvalidArgument(
      "the model needs about " + FormatBytes(m.total()) + " (weights " +
      (stored_bytes != 0 ? std::string("as stored ") : std::string("in fp32 ")) +
      FormatBytes(m.weights) + " + packed fp32 copy " + FormatBytes(m.packed) +
      " + RoPE tables " + FormatBytes(m.rope) + " + KV cache of one " +
      std::to_string(std::min(config.max_seq_len, kKvEstimateTokens)) + "-token sequence " +
      FormatBytes(m.kv_cache) + ") but this process can use " + FormatBytes(available) +
      " (RAM or address-space limit); check n_layers, d_model, vocab_size and the context "
      "length in config.json");
}

StatusOr<GenerationDefaults> ParseGenerationDefaults(const json& j, const ModelConfig& config) {
  GenerationDefaults d;
  // The built-in defaults, capped so a small model's context still holds a prompt token.
  d.gen_length = std::min(d.gen_length, config.max_seq_len - 1);
  d.block_size = std::min(d.block_size, d.gen_length);
  if (d.gen_length % d.block_size != 0) d.block_size = d.gen_length;
  const auto it = j.find("tediserve");
  if (it == j.end() || it->is_null()) return d;
  if (!it->is_object()) {
    return InvalidArgument("key 'tediserve' must be an object {\"gen_length\", \"block_size\"}, "
                           "got " + JsonSnippet(*it));
  }
  const int max_gen = config.max_seq_len - 1;
  bool has_gen = false;
  if (const auto g = it->find("gen_length"); g != it->end() && !g->is_null()) {
    ASSIGN_OR_RETURN(const int64_t v, JsonInt(*g, "tediserve.gen_length", 1, max_gen));
    d.gen_length = static_cast<int>(v);
    has_gen = true;
  }
  if (const auto b = it->find("block_size"); b != it->end() && !b->is_null()) {
    ASSIGN_OR_RETURN(const int64_t v, JsonInt(*b, "tediserve.block_size", 1, d.gen_length));
    d.block_size = static_cast<int>(v);
  } else if (has_gen) {
    d.block_size = std::min(32, d.gen_length);
    if (d.gen_length % d.block_size != 0) d.block_size = d.gen_length;
  }
  if (d.gen_length % d.block_size != 0) {
    return InvalidArgument("tediserve.gen_length " + std::to_string(d.gen_length) +
                           " is not a multiple of tediserve.block_size " +
                           std::to_string(d.block_size));
  }
  return d;
}

StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "model config"));
  const std::string where = SanitizeUtf8(path);
  ASSIGN_OR_RETURN(const json j, ParseJson(text, where));
  RETURN_IF_ERROR(CheckNoDuplicateKeys(text, where));
  StatusOr<ModelConfig> config = ModelConfig::FromJsonValue(j);
  if (!config.ok()) return config.status().WithContext(where);
  StatusOr<GenerationDefaults> d = ParseGenerationDefaults(j, *config);
  if (!d.ok()) return d.status().WithContext(where);
  return d;
}

GenerationDefaults ReadGenerationDefaults(const std::string& model_dir) {
  StatusOr<GenerationDefaults> d = LoadGenerationDefaults(model_dir);
  return d.ok() ? *d : GenerationDefaults{};
}

}  // namespace tediserve::engine
