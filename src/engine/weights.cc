#include "engine/weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"
#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "engine/vector_math.h"

namespace tediserve::engine {

namespace {

namespace fs = std::filesystem;

// The checkpoint's tensor names for one architecture; the engine layout is fixed, the file
// layout differs per family.
struct LayerNames {
  std::string attn_norm, ffn_norm, wq, wk, wv, wo, bq, bk, bv, w_gate, w_up, w_down;
};
struct ModelNames {
  std::string embed, final_norm, lm_head;
};

ModelNames NamesFor(Architecture arch) {
  if (arch == Architecture::kLLaDA) {
    return {"model.transformer.wte.weight", "model.transformer.ln_f.weight",
            "model.transformer.ff_out.weight"};
  }
  return {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
}

LayerNames NamesFor(Architecture arch, int layer) {
  LayerNames n;
  if (arch == Architecture::kLLaDA) {
    const std::string p = "model.transformer.blocks." + std::to_string(layer) + ".";
    n.attn_norm = p + "attn_norm.weight";
    n.ffn_norm = p + "ff_norm.weight";
    n.wq = p + "q_proj.weight";
    n.wk = p + "k_proj.weight";
    n.wv = p + "v_proj.weight";
    n.wo = p + "attn_out.weight";
    n.w_gate = p + "ff_proj.weight";
    n.w_up = p + "up_proj.weight";
    n.w_down = p + "ff_out.weight";
    return n;
  }
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  n.attn_norm = p + "input_layernorm.weight";
  n.ffn_norm = p + "post_attention_layernorm.weight";
  n.wq = p + "self_attn.q_proj.weight";
  n.wk = p + "self_attn.k_proj.weight";
  n.wv = p + "self_attn.v_proj.weight";
  n.bq = p + "self_attn.q_proj.bias";
  n.bk = p + "self_attn.k_proj.bias";
  n.bv = p + "self_attn.v_proj.bias";
  n.wo = p + "self_attn.o_proj.weight";
  n.w_gate = p + "mlp.gate_proj.weight";
  n.w_up = p + "mlp.up_proj.weight";
  n.w_down = p + "mlp.down_proj.weight";
  return n;
}

// Reads the tensors the architecture needs out of a Checkpoint, checking each against the
// shape config.json implies, and tallies the bytes.
class TensorReader {
 public:
  explicit TensorReader(const Checkpoint& ckpt) : ckpt_(ckpt) {}

  StatusOr<Checkpoint::Entry> Lookup(const std::string& name, const std::vector<int64_t>& want) const {
    const std::optional<Checkpoint::Entry> e = ckpt_.Find(name);
    if (!e) {
      if (ckpt_.has_index()) {
        return NotFound("tensor '" + name + "' is not in " + SanitizeUtf8(ckpt_.dir()) + "/" +
                        kCheckpointIndexFile + " (its weight_map does not name it)");
      }
      return NotFound("tensor '" + name + "' is in none of the *.safetensors files in " +
                      SanitizeUtf8(ckpt_.dir()));
    }
    const TensorInfo& info = *e->info;
    const std::string where = SanitizeUtf8(e->file->path()) + ": tensor '" + name + "' ";
    if (info.shape != want) {
      return InvalidArgument(where + "has shape " + ShapeToString(info.shape) +
                             " but config.json implies " + ShapeToString(want));
    }
    switch (info.dtype) {
      case DType::kF32:
      case DType::kBF16:
      case DType::kF16:
        return *e;
      case DType::kF64:
      case DType::kF8E5M2:
      case DType::kF8E4M3:
        return Unimplemented(where + "has dtype " + DTypeName(info.dtype) +
                             ", which the engine cannot use (supported: F32, BF16, F16)");
      default:
        return InvalidArgument(where + "has dtype " + DTypeName(info.dtype) +
                               ", not a float dtype (expected F32, BF16 or F16)");
    }
  }

  // A matrix as a view into the mapping (copied to fp32 only for an F32 tensor whose bytes
  // are not 4-byte aligned in the file, which the format allows).
  StatusOr<Matrix> ReadMatrix(const std::string& name, int rows, int cols) {
    ASSIGN_OR_RETURN(const Checkpoint::Entry e, Lookup(name, {rows, cols}));
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    ASSIGN_OR_RETURN(const std::span<const std::byte> bytes, e.file->RawData(name));
    const bool aligned = reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0;
    if (e.info->dtype == DType::kF32 && !aligned) {
      ASSIGN_OR_RETURN(m.data, e.file->ReadFloat(name));
      owned_bytes += m.data.size() * sizeof(float);
      return m;
    }
    m.mapped = bytes.data();
    m.type = e.info->dtype == DType::kF32 ? WeightType::kF32
             : e.info->dtype == DType::kBF16 ? WeightType::kBF16 : WeightType::kF16;
    mapped_bytes += bytes.size();
    return m;
  }

  StatusOr<std::vector<float>> ReadVector(const std::string& name, int size) {
    ASSIGN_OR_RETURN(const Checkpoint::Entry e, Lookup(name, {size}));
    ASSIGN_OR_RETURN(std::vector<float> v, e.file->ReadFloat(name));
    owned_bytes += v.size() * sizeof(float);
    return v;
  }

  // Bytes of the needed tensors as stored, before anything is read (for the memory check).
  StatusOr<uint64_t> StoredBytes(const std::vector<std::pair<std::string, std::vector<int64_t>>>& needed) const {
    uint64_t total = 0;
    for (const auto& [name, shape] : needed) {
      ASSIGN_OR_RETURN(const Checkpoint::Entry e, Lookup(name, shape));
      total += e.info->data_end - e.info->data_begin;
    }
    return total;
  }

  uint64_t mapped_bytes = 0, owned_bytes = 0;

 private:
  const Checkpoint& ckpt_;
};

StatusOr<LayerWeights> LoadLayer(TensorReader& ckpt, const ModelConfig& c, int layer) {
  const LayerNames n = NamesFor(c.arch, layer);
  const int q_rows = c.n_heads * c.head_dim;
  const int kv_rows = c.n_kv_heads * c.head_dim;
  LayerWeights w;
  ASSIGN_OR_RETURN(w.attn_norm, ckpt.ReadVector(n.attn_norm, c.d_model));
  ASSIGN_OR_RETURN(w.wq, ckpt.ReadMatrix(n.wq, q_rows, c.d_model));
  ASSIGN_OR_RETURN(w.wk, ckpt.ReadMatrix(n.wk, kv_rows, c.d_model));
  ASSIGN_OR_RETURN(w.wv, ckpt.ReadMatrix(n.wv, kv_rows, c.d_model));
  if (c.qkv_bias) {
    ASSIGN_OR_RETURN(w.bq, ckpt.ReadVector(n.bq, q_rows));
    ASSIGN_OR_RETURN(w.bk, ckpt.ReadVector(n.bk, kv_rows));
    ASSIGN_OR_RETURN(w.bv, ckpt.ReadVector(n.bv, kv_rows));
  }
  ASSIGN_OR_RETURN(w.wo, ckpt.ReadMatrix(n.wo, c.d_model, q_rows));
  ASSIGN_OR_RETURN(w.ffn_norm, ckpt.ReadVector(n.ffn_norm, c.d_model));
  ASSIGN_OR_RETURN(w.w_gate, ckpt.ReadMatrix(n.w_gate, c.mlp_hidden, c.d_model));
  ASSIGN_OR_RETURN(w.w_up, ckpt.ReadMatrix(n.w_up, c.mlp_hidden, c.d_model));
  ASSIGN_OR_RETURN(w.w_down, ckpt.ReadMatrix(n.w_down, c.d_model, c.mlp_hidden));
  return w;
}

// Every tensor the architecture needs, with the shape config.json implies, in load order.
std::vector<std::pair<std::string, std::vector<int64_t>>> NeededTensors(const ModelConfig& c,
                                                                        bool with_head) {
  const ModelNames names = NamesFor(c.arch);
  const int64_t d = c.d_model, q = int64_t{c.n_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, mlp = c.mlp_hidden, vocab = c.vocab_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({names.embed, {vocab, d}});
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerNames n = NamesFor(c.arch, i);
    out.push_back({n.attn_norm, {d}});
    out.push_back({n.wq, {q, d}});
    out.push_back({n.wk, {kv, d}});
    out.push_back({n.wv, {kv, d}});
    if (c.qkv_bias) {
      out.push_back({n.bq, {q}});
      out.push_back({n.bk, {kv}});
      out.push_back({n.bv, {kv}});
    }
    out.push_back({n.wo, {d, q}});
    out.push_back({n.ffn_norm, {d}});
    out.push_back({n.w_gate, {mlp, d}});
    out.push_back({n.w_up, {mlp, d}});
    out.push_back({n.w_down, {d, mlp}});
  }
  out.push_back({names.final_norm, {d}});
  if (with_head) out.push_back({names.lm_head, {vocab, d}});
  return out;
}

// An id from generation_config.json: an integer, or null / absent (nullopt).
StatusOr<std::vector<int32_t>> GenerationIds(const nlohmann::json& j, const char* key,
                                             const std::string& where) {
  std::vector<int32_t> ids;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
  if (list.size() > 64) return InvalidArgument(where + ": '" + key + "' lists more than 64 ids");
  for (const nlohmann::json& v : list) {
    ASSIGN_OR_RETURN(const int64_t id, JsonInt(v, where + ": " + key, 0, kMaxVocab - 1));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// The id of a special token named in tokenizer_config.json (a string, or an AddedToken object
// {"content": ...}): its own added_tokens_decoder first, else tokenizer.json's added_tokens
// or vocabulary (read only when needed). nullopt when the key is absent or null.
class SpecialTokenResolver {
 public:
  SpecialTokenResolver(const std::string& dir, const nlohmann::json& tokenizer_config, std::string where)
      : dir_(dir), config_(tokenizer_config), where_(std::move(where)) {}

  StatusOr<std::optional<int32_t>> Resolve(const char* key) {
    const auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return std::optional<int32_t>();
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      content = (*it)["content"].get<std::string>();
    } else {
      return InvalidArgument(where_ + ": '" + key + "' must be a token string or {\"content\": ...}, got " +
                             JsonSnippet(*it));
    }
    if (const auto dec = config_.find("added_tokens_decoder"); dec != config_.end() && dec->is_object()) {
      for (const auto& [id_text, entry] : dec->items()) {
        if (!entry.is_object() || !entry.contains("content") || entry["content"] != content) continue;
        char* end = nullptr;
        const long id = std::strtol(id_text.c_str(), &end, 10);
        if (id_text.empty() || *end != '\0' || id < 0 || id >= kMaxVocab) {
          return InvalidArgument(where_ + ": added_tokens_decoder key '" + SanitizeUtf8(id_text.substr(0, 40)) +
                                 "' is not a token id");
        }
        return std::optional<int32_t>(static_cast<int32_t>(id));
      }
    }
    ASSIGN_OR_RETURN(const nlohmann::json* tok, TokenizerJson());
    if (tok != nullptr) {
      if (const auto added = tok->find("added_tokens"); added != tok->end() && added->is_array()) {
        for (const nlohmann::json& t : *added) {
          if (t.is_object() && t.contains("content") && t["content"] == content && t.contains("id") &&
              t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() < kMaxVocab) {
            return std::optional<int32_t>(static_cast<int32_t>(t["id"].get<int64_t>()));
          }
        }
      }
      if (const auto model = tok->find("model"); model != tok->end() && model->is_object()) {
        if (const auto vocab = model->find("vocab"); vocab != model->end() && vocab->is_object()) {
          if (const auto v = vocab->find(content); v != vocab->end() && v->is_number_integer() &&
                                                   v->get<int64_t>() >= 0 && v->get<int64_t>() < kMaxVocab) {
            return std::optional<int32_t>(static_cast<int32_t>(v->get<int64_t>()));
          }
        }
      }
    }
    return InvalidArgument(where_ + ": '" + key + "' is '" + SanitizeUtf8(content.substr(0, 80)) +
                           "', a token neither its added_tokens_decoder nor tokenizer.json knows");
  }

 private:
  StatusOr<const nlohmann::json*> TokenizerJson() {
    if (loaded_) return tokenizer_.is_null() ? nullptr : &tokenizer_;
    loaded_ = true;
    const std::string path = (fs::path(dir_) / "tokenizer.json").string();
    std::error_code ec;
    if (!fs::exists(path, ec)) return nullptr;
    ASSIGN_OR_RETURN(tokenizer_, ReadJsonFile(path, "tokenizer.json"));
    return &tokenizer_;
  }

  std::string dir_;
  const nlohmann::json& config_;
  std::string where_;
  bool loaded_ = false;
  nlohmann::json tokenizer_;
};

}  // namespace

Status LoadSpecialTokens(const std::string& dir, ModelConfig* c) {
  auto add_eos = [c](int32_t id) {
    if (!c->IsEos(id)) c->eos_token_ids.push_back(id);
  };
  if (c->eos_token_ids.empty()) c->eos_token_ids.push_back(c->eos_token_id);
  std::error_code ec;
  const fs::path gen_path = fs::path(dir) / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    const std::string where = SanitizeUtf8(gen_path.string());
    ASSIGN_OR_RETURN(const std::string text, ReadFile(gen_path.string(), "generation config", 16u << 20));
    ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, where));
    RETURN_IF_ERROR(CheckNoDuplicateKeys(text, where));
    if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
    ASSIGN_OR_RETURN(const std::vector<int32_t> eos, GenerationIds(j, "eos_token_id", where));
    for (const int32_t id : eos) add_eos(id);
    ASSIGN_OR_RETURN(const std::vector<int32_t> bos, GenerationIds(j, "bos_token_id", where));
    if (!bos.empty() && c->bos_token_id < 0) c->bos_token_id = bos.front();
    ASSIGN_OR_RETURN(const std::vector<int32_t> pad, GenerationIds(j, "pad_token_id", where));
    if (!pad.empty() && c->pad_token_id < 0) c->pad_token_id = pad.front();
    ASSIGN_OR_RETURN(const std::vector<int32_t> mask, GenerationIds(j, "mask_token_id", where));
    if (!mask.empty() && mask.front() != c->mask_token_id) {
      return InvalidArgument(where + ": mask_token_id " + std::to_string(mask.front()) +
                             " disagrees with config.json's " + std::to_string(c->mask_token_id));
    }
  }
  const fs::path tok_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(tok_path, ec)) {
    const std::string where = SanitizeUtf8(tok_path.string());
    ASSIGN_OR_RETURN(const std::string text, ReadFile(tok_path.string(), "tokenizer config", 64u << 20));
    ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, where));
    RETURN_IF_ERROR(CheckNoDuplicateKeys(text, where));
    if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
    SpecialTokenResolver resolver(dir, j, where);
    ASSIGN_OR_RETURN(const std::optional<int32_t> eos, resolver.Resolve("eos_token"));
    if (eos) add_eos(*eos);
    ASSIGN_OR_RETURN(const std::optional<int32_t> bos, resolver.Resolve("bos_token"));
    if (bos && c->bos_token_id < 0) c->bos_token_id = *bos;
    ASSIGN_OR_RETURN(const std::optional<int32_t> pad, resolver.Resolve("pad_token"));
    if (pad && c->pad_token_id < 0) c->pad_token_id = *pad;
  }
  return c->Validate();
}

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32: return "F32";
    case WeightType::kBF16: return "BF16";
    case WeightType::kF16: return "F16";
  }
  return "?";
}

size_t WeightTypeSize(WeightType type) { return type == WeightType::kF32 ? 4 : 2; }

void Matrix::RowToFloat(int r, int c0, int n, float* out) const {
  const size_t off = static_cast<size_t>(r) * cols + c0;
  if (!is_view()) {
    std::memcpy(out, data.data() + off, n * sizeof(float));
    return;
  }
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out, static_cast<const float*>(mapped) + off, n * sizeof(float));
      return;
    case WeightType::kBF16:
      vec::Bf16ToFloat(static_cast<const uint16_t*>(mapped) + off, out, n);
      return;
    case WeightType::kF16:
      vec::F16ToFloat(static_cast<const uint16_t*>(mapped) + off, out, n);
      return;
  }
}

std::vector<float> Matrix::ToFloat() const {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) RowToFloat(r, 0, cols, out.data() + static_cast<size_t>(r) * cols);
  return out;
}

StatusOr<LoadedModel> LoadModel(const std::string& dir) {
  std::error_code ec;
  const std::string shown = SanitizeUtf8(dir);
  if (!fs::exists(dir, ec)) return NotFound(shown + ": model folder does not exist");
  if (!fs::is_directory(dir, ec)) return InvalidArgument(shown + ": not a folder");

  LoadedModel model;
  model.dir = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string config_where = SanitizeUtf8(config_path);
  // config.json of a real model is a few KB; 16 MiB leaves room and bounds the parse.
  ASSIGN_OR_RETURN(const std::string config_text,
                   ReadFile(config_path, "model config", std::uint64_t{16} << 20));
  ASSIGN_OR_RETURN(const nlohmann::json config_json, ParseJson(config_text, config_where));
  RETURN_IF_ERROR(CheckNoDuplicateKeys(config_text, config_where));
  StatusOr<ModelConfig> config = ModelConfig::FromJsonValue(config_json);
  if (!config.ok()) return config.status().WithContext(config_where);
  model.config = *config;
  ModelConfig& c = model.config;
  StatusOr<GenerationDefaults> generation = ParseGenerationDefaults(config_json, c);
  if (!generation.ok()) return generation.status().WithContext(config_where);
  model.generation = *generation;
  // Before any shard is opened: a config whose shapes cannot fit even in 16-bit weights fails
  // here by name instead of in std::bad_alloc halfway through the checkpoint.
  {
    const ModelMemory fp32 = EstimateModelMemory(c);
    RETURN_IF_ERROR(CheckModelFitsMemory(c, 0, std::max<uint64_t>(1, fp32.weights / 2)).WithContext(config_where));
  }
  RETURN_IF_ERROR(LoadSpecialTokens(dir, &c));

  ASSIGN_OR_RETURN(const Checkpoint ckpt, Checkpoint::Open(dir));
  const ModelNames names = NamesFor(c.arch);
  // Tied checkpoints usually omit the head; if one stores it anyway, use what is stored.
  const bool has_head = !c.tie_embeddings || ckpt.Has(names.lm_head);
  TensorReader reader(ckpt);
  // With the dtypes known: the weights as they will be held.
  ASSIGN_OR_RETURN(const uint64_t stored, reader.StoredBytes(NeededTensors(c, has_head)));
  RETURN_IF_ERROR(CheckModelFitsMemory(c, 0, stored).WithContext(config_where));

  ModelWeights& w = model.weights;
  ASSIGN_OR_RETURN(w.embed, reader.ReadMatrix(names.embed, c.vocab_size, c.d_model));
  w.layers.reserve(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    ASSIGN_OR_RETURN(LayerWeights layer, LoadLayer(reader, c, i));
    w.layers.push_back(std::move(layer));
  }
  ASSIGN_OR_RETURN(w.final_norm, reader.ReadVector(names.final_norm, c.d_model));
  if (has_head) {
    ASSIGN_OR_RETURN(w.lm_head, reader.ReadMatrix(names.lm_head, c.vocab_size, c.d_model));
  } else {
    w.lm_head = w.embed;  // a view is shared, owned data copied
  }
  model.files = ckpt.files();
  model.mapped_bytes = reader.mapped_bytes;
  model.owned_bytes = reader.owned_bytes;
  // Start reading the mapped pages in now, in the background (the first step would fault
  // them in one by one otherwise).
  for (const auto& f : model.files) f->AdviseWillNeed();
  return model;
}

}  // namespace tediserve::engine
