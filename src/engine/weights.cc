#include "engine/weights.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"
#include "engine/safetensors.h"

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

// Every *.safetensors shard of a folder, with an index from tensor name to shard.
class Checkpoint {
 public:
  static StatusOr<Checkpoint> Open(const std::string& dir) {
    std::vector<fs::path> paths;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) {
        paths.push_back(e.path());
      }
    }
    if (ec) return Internal(dir + ": cannot list the folder: " + ec.message());
    if (paths.empty()) return NotFound(dir + ": no *.safetensors files in the model folder");
    std::sort(paths.begin(), paths.end());  // deterministic shard order and error messages

    Checkpoint ckpt;
    ckpt.dir_ = dir;
    for (const fs::path& p : paths) {
      ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::Open(p.string()));
      const size_t index = ckpt.shards_.size();
      for (const std::string& name : shard.names()) {
        const auto [it, inserted] = ckpt.where_.emplace(name, index);
        if (!inserted) {
          return DataLoss("tensor '" + name + "' appears in both " +
                          ckpt.shards_[it->second].path() + " and " + shard.path());
        }
      }
      ckpt.shards_.push_back(std::move(shard));
    }
    return ckpt;
  }

  bool Has(const std::string& name) const { return where_.count(name) != 0; }

  // The tensor in fp32, checked against the shape config.json implies.
  StatusOr<std::vector<float>> Read(const std::string& name,
                                    const std::vector<int64_t>& want) const {
    const auto it = where_.find(name);
    if (it == where_.end()) {
      return NotFound("tensor '" + name + "' is in none of the *.safetensors files in " + dir_);
    }
    const SafetensorsFile& shard = shards_[it->second];
    const TensorInfo* info = shard.Find(name);
    if (info->shape != want) {
      return InvalidArgument(shard.path() + ": tensor '" + name + "' has shape " +
                             ShapeToString(info->shape) + " but config.json implies " +
                             ShapeToString(want));
    }
    return shard.ReadFloat(name);
  }

  StatusOr<Matrix> ReadMatrix(const std::string& name, int rows, int cols) const {
    Matrix m;
    ASSIGN_OR_RETURN(m.data, Read(name, {rows, cols}));
    m.rows = rows;
    m.cols = cols;
    return m;
  }

  StatusOr<std::vector<float>> ReadVector(const std::string& name, int size) const {
    return Read(name, {size});
  }

 private:
  std::string dir_;
  std::vector<SafetensorsFile> shards_;
  std::unordered_map<std::string, size_t> where_;
};

StatusOr<LayerWeights> LoadLayer(const Checkpoint& ckpt, const ModelConfig& c, int layer) {
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

}  // namespace

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
  const ModelConfig& c = model.config;
  StatusOr<GenerationDefaults> generation = ParseGenerationDefaults(config_json, c);
  if (!generation.ok()) return generation.status().WithContext(config_where);
  model.generation = *generation;
  // Before any tensor is read: a config whose shapes cannot fit fails here by name instead
  // of in std::bad_alloc halfway through the checkpoint.
  RETURN_IF_ERROR(CheckModelFitsMemory(c).WithContext(config_where));

  ASSIGN_OR_RETURN(const Checkpoint ckpt, Checkpoint::Open(dir));
  const ModelNames names = NamesFor(c.arch);
  ModelWeights& w = model.weights;
  ASSIGN_OR_RETURN(w.embed, ckpt.ReadMatrix(names.embed, c.vocab_size, c.d_model));
  w.layers.reserve(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    ASSIGN_OR_RETURN(LayerWeights layer, LoadLayer(ckpt, c, i));
    w.layers.push_back(std::move(layer));
  }
  ASSIGN_OR_RETURN(w.final_norm, ckpt.ReadVector(names.final_norm, c.d_model));
  // Tied checkpoints usually omit the head; if one stores it anyway, use what is stored.
  if (c.tie_embeddings && !ckpt.Has(names.lm_head)) {
    w.lm_head = w.embed;
  } else {
    ASSIGN_OR_RETURN(w.lm_head, ckpt.ReadMatrix(names.lm_head, c.vocab_size, c.d_model));
  }
  return model;
}

}  // namespace tediserve::engine
