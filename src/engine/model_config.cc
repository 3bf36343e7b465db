#include "engine/model_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

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
  Status Float(const char* key, float* out, float fallback) const {
    if (!Has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    const json& v = j_.at(key);
    if (!v.is_number()) return WrongType(key, "a number", v);
    *out = v.get<float>();
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
                           v.dump());
  }
  static Status ToInt(const char* key, const json& v, int* out) {
    if (!v.is_number_integer()) return WrongType(key, "an integer", v);
    // Compare as int64 so both signed and unsigned JSON numbers are range-checked.
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return InvalidArgument(std::string("key '") + key + "' = " + v.dump() + " is too large");
    }
    const int64_t x = v.get<int64_t>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
      return InvalidArgument(std::string("key '") + key + "' = " + v.dump() + " is out of range");
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
                             arch_it->dump());
    }
    const std::string name = (*arch_it)[0].get<std::string>();
    if (name == "LLaDAModelLM" || name == "LLaDAModel") return Architecture::kLLaDA;
    if (name == "DreamModel") return Architecture::kDream;
    return InvalidArgument("unknown architecture '" + name + "'" + kSupported);
  }
  const auto type_it = j.find("model_type");
  if (type_it != j.end() && type_it->is_string()) {
    const std::string type = type_it->get<std::string>();
    if (type == "llada") return Architecture::kLLaDA;
    if (type == "Dream" || type == "dream") return Architecture::kDream;
    return InvalidArgument("unknown architecture '" + type + "'" + kSupported);
  }
  return InvalidArgument(std::string("neither 'architectures' nor 'model_type' says which "
                                     "architecture this is") + kSupported);
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
  RETURN_IF_ERROR(keys.TokenId("eos_token_id", &c->eos_token_id, 126081));
  RETURN_IF_ERROR(keys.Bool("weight_tying", &c->tie_embeddings, false));
  bool include_bias = false;
  RETURN_IF_ERROR(keys.Bool("include_bias", &include_bias, false));
  if (include_bias) return Unimplemented("LLaDA with include_bias=true is not supported");
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
  RETURN_IF_ERROR(keys.TokenId("eos_token_id", &c->eos_token_id, 151643));
  RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c->tie_embeddings, false));
  // The forward pass implements plain RoPE over full attention; refuse rather than compute
  // something else silently.
  if (keys.Has("rope_scaling")) {
    return Unimplemented("Dream with rope_scaling " + j.at("rope_scaling").dump() +
                         " is not supported");
  }
  bool sliding = false;
  RETURN_IF_ERROR(keys.Bool("use_sliding_window", &sliding, false));
  if (sliding) return Unimplemented("Dream with use_sliding_window=true is not supported");
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

StatusOr<ModelConfig> ModelConfig::FromJson(const std::string& json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
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
  const std::pair<const char*, int> positive[] = {
      {"d_model", d_model},         {"n_layers", n_layers},       {"n_heads", n_heads},
      {"n_kv_heads", n_kv_heads},   {"head_dim", head_dim},       {"mlp_hidden", mlp_hidden},
      {"vocab_size", vocab_size},   {"max_seq_len", max_seq_len},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return InvalidArgument(std::string(name) + " must be positive, got " +
                             std::to_string(value));
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
  return Status::Ok();
}

GenerationDefaults ReadGenerationDefaults(const std::string& model_dir) {
  GenerationDefaults d;
  std::ifstream in(std::filesystem::path(model_dir) / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("tediserve") && j["tediserve"].is_object()) {
    const auto& t = j["tediserve"];
    if (t.contains("gen_length") && t["gen_length"].is_number_integer()) d.gen_length = t["gen_length"];
    if (t.contains("block_size") && t["block_size"].is_number_integer()) d.block_size = t["block_size"];
  }
  return d;
}

}  // namespace tediserve::engine
