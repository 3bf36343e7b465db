#include "cli/make_checkpoint_command.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/model_setup.h"
#include "common/input.h"
#include "common/machine.h"
#include "engine/checkpoint.h"
#include "engine/float16.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace tediserve::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// GSAI-ML/LLaDA-8B-Instruct's config.json as published (tests/fixtures/published_configs).
json LLaDA8BConfig() {
  return json::parse(R"({
  "activation_type": "silu", "alibi": false, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
  "attention_dropout": 0.0, "attention_layer_norm": false, "attention_layer_norm_with_affine": true,
  "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
               "AutoModel": "modeling_llada.LLaDAModelLM"},
  "bias_for_layer_norm": false, "block_group_size": 1, "block_type": "llama", "d_model": 4096,
  "embedding_dropout": 0.0, "embedding_size": 126464, "eos_token_id": 126081, "flash_attention": false,
  "include_bias": false, "include_qkv_bias": false, "init_cutoff_factor": null, "init_device": "meta",
  "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": false, "layer_norm_type": "rms",
  "layer_norm_with_affine": true, "mask_token_id": 126336, "max_sequence_length": 4096, "mlp_hidden_size": 12288,
  "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": null, "n_heads": 32, "n_kv_heads": 32,
  "n_layers": 32, "pad_token_id": 126081, "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": 1e-05,
  "rope": true, "rope_full_precision": true, "rope_theta": 500000.0, "scale_logits": false,
  "transformers_version": "4.46.3", "use_cache": false, "vocab_size": 126464, "weight_tying": false})");
}

// Dream-v0-Instruct-7B's config.json (tests/fixtures/published_configs).
json Dream7BConfig() {
  return json::parse(R"({
  "architectures": ["DreamModel"], "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
  "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
  "initializer_range": 0.02, "intermediate_size": 18944, "mask_token_id": 151666, "max_position_embeddings": 131072,
  "max_window_layers": 28, "model_type": "Dream", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "pad_token_id": 151643, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.46.2", "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})");
}

// Tensor names and shapes of a config, in load order.
std::vector<engine::TensorSpec> Layout(const engine::ModelConfig& c, engine::DType dtype) {
  const bool llada = c.arch == engine::Architecture::kLLaDA;
  const int64_t d = c.d_model, q = int64_t{c.n_heads} * c.head_dim, kv = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t mlp = c.mlp_hidden, vocab = c.vocab_size;
  std::vector<engine::TensorSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape) { out.push_back({std::move(name), dtype, std::move(shape)}); };
  add(llada ? "model.transformer.wte.weight" : "model.embed_tokens.weight", {vocab, d});
  for (int l = 0; l < c.n_layers; ++l) {
    if (llada) {
      const std::string p = "model.transformer.blocks." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {d});
      add(p + "q_proj.weight", {q, d});
      add(p + "k_proj.weight", {kv, d});
      add(p + "v_proj.weight", {kv, d});
      add(p + "attn_out.weight", {d, q});
      add(p + "ff_norm.weight", {d});
      add(p + "ff_proj.weight", {mlp, d});
      add(p + "up_proj.weight", {mlp, d});
      add(p + "ff_out.weight", {d, mlp});
    } else {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {d});
      add(p + "self_attn.q_proj.weight", {q, d});
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.weight", {kv, d});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.weight", {kv, d});
      add(p + "self_attn.v_proj.bias", {kv});
      add(p + "self_attn.o_proj.weight", {d, q});
      add(p + "post_attention_layernorm.weight", {d});
      add(p + "mlp.gate_proj.weight", {mlp, d});
      add(p + "mlp.up_proj.weight", {mlp, d});
      add(p + "mlp.down_proj.weight", {d, mlp});
    }
  }
  add(llada ? "model.transformer.ln_f.weight" : "model.norm.weight", {d});
  add(llada ? "model.transformer.ff_out.weight" : "lm_head.weight", {vocab, d});
  return out;
}

uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Random weights: matrices uniform in +-1/sqrt(fan_in) (activations stay O(1) through the
// layers), norm weights 1, biases +-0.02. Deterministic in (seed, tensor, offset).
void FillRandom(const engine::TensorSpec& t, size_t index, uint64_t offset, std::span<std::byte> out, uint64_t seed) {
  const bool is_norm = t.shape.size() == 1 && t.name.find("bias") == std::string::npos;
  const float amp = t.shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(t.shape[1])) : 0.02f;
  uint64_t state = seed * 0x100000001B3ULL ^ (static_cast<uint64_t>(index) << 40) ^ offset;
  const size_t esize = engine::DTypeSize(t.dtype);
  const size_t n = out.size() / esize;
  uint64_t bits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 4 == 0) bits = SplitMix(&state);
    const auto r16 = static_cast<int16_t>(bits >> (16 * (i % 4)));
    const float x = is_norm ? 1.0f : amp * (static_cast<float>(r16) / 32768.0f);
    std::byte* p = out.data() + i * esize;
    if (t.dtype == engine::DType::kF32) {
      std::memcpy(p, &x, 4);
    } else {
      const uint16_t h = t.dtype == engine::DType::kBF16 ? engine::FloatToBf16(x) : engine::FloatToF16(x);
      std::memcpy(p, &h, 2);
    }
  }
}

}  // namespace

CLI::App* AddMakeCheckpointCommand(CLI::App& app, MakeCheckpointArgs* a) {
  CLI::App* c = app.add_subcommand(
      "make-checkpoint", "write a random-weight checkpoint in a published layout (sharded safetensors + index)");
  c->add_option("--preset", a->preset,
                "llada-8b (GSAI-ML/LLaDA-8B-Instruct's config and shapes), dream-7b (Dream-v0-Instruct-7B's), or "
                "llada-test / dream-test (the same configs at tiny dimensions, for tests)")
      ->check(CLI::IsMember({"llada-8b", "dream-7b", "llada-test", "dream-test"}));
  c->add_option("--out", a->out_dir, "folder to write (created; must be empty unless --force)")->required();
  c->add_option("--dtype", a->dtype, "bf16 (as published), f16 or f32")->check(CLI::IsMember({"bf16", "f16", "f32"}));
  c->add_option("--layers", a->layers, "number of layers (default: the preset's)")->check(CLI::Range(1, 1024));
  c->add_option("--shard-gb", a->shard_gb, "largest shard in GB")->check(CLI::Range(0.001, 1000.0));
  c->add_option("--seed", a->seed, "random seed");
  c->add_flag("--force", a->force, "write into a folder that is not empty");
  return c;
}

int RunMakeCheckpoint(const MakeCheckpointArgs& a) {
  const bool dream = a.preset.rfind("dream", 0) == 0;
  json config = dream ? Dream7BConfig() : LLaDA8BConfig();
  // The test presets: the published config files with small dimensions (tests of the whole
  // published layout, from make-checkpoint through loading and running, in seconds). Dream
  // keeps its GQA ratio (7 query heads per kv head), biases and shifted logits.
  if (a.preset == "llada-test") {
    config.update({{"d_model", 64}, {"n_heads", 4}, {"n_kv_heads", 4}, {"n_layers", 2}, {"mlp_hidden_size", 96},
                   {"max_sequence_length", 256}});
  } else if (a.preset == "dream-test") {
    config.update({{"hidden_size", 56}, {"num_attention_heads", 7}, {"num_key_value_heads", 1},
                   {"num_hidden_layers", 2}, {"intermediate_size", 80}, {"max_position_embeddings", 256}});
  }
  if (a.layers > 0) config[dream ? "num_hidden_layers" : "n_layers"] = a.layers;
  StatusOr<engine::ModelConfig> c = engine::ModelConfig::FromJsonValue(config);
  if (!c.ok()) return ReportError(c.status());
  const engine::DType dtype = a.dtype == "f32" ? engine::DType::kF32
                              : a.dtype == "f16" ? engine::DType::kF16 : engine::DType::kBF16;
  config["torch_dtype"] = a.dtype == "f32" ? "float32" : a.dtype == "f16" ? "float16" : "bfloat16";

  std::error_code ec;
  const fs::path dir(a.out_dir);
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return ReportError(InvalidArgument(a.out_dir + ": exists and is not a folder"));
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !a.force)
    return ReportError(InvalidArgument(a.out_dir + ": folder is not empty (use --force to write into it)"));
  fs::create_directories(dir, ec);
  if (ec) return ReportError(IoError(a.out_dir + ": cannot create: " + ec.message()));

  // Shards: tensors in load order, a new shard when the next tensor would pass the limit.
  const std::vector<engine::TensorSpec> tensors = Layout(*c, dtype);
  const uint64_t limit = static_cast<uint64_t>(a.shard_gb * 1e9);
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].bytes();
    if (in_shard > 0 && in_shard + n > limit) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
    total += n;
  }
  // Enough free disk for the whole checkpoint, before anything is written.
  const fs::space_info space = fs::space(dir, ec);
  if (!ec && space.available < total + (uint64_t{64} << 20))
    return ReportError(ResourceExhausted(a.out_dir + ": the checkpoint needs " + FormatBytes(total) + " but " +
                                         FormatBytes(space.available) + " of disk is free"));
  std::printf("make-checkpoint: %s, %d layers, %s, %zu tensors, %s in %zu shard(s) -> %s\n", a.preset.c_str(),
              c->n_layers, engine::DTypeName(dtype), tensors.size(), FormatBytes(total).c_str(), shards.size(),
              a.out_dir.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<engine::TensorSpec> specs;
    for (size_t i : shards[s]) {
      specs.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
    }
    const Status st = engine::WriteSafetensorsStreaming(
        (dir / name).string(), specs, [&](size_t k, uint64_t off, std::span<std::byte> out) {
          FillRandom(specs[k], shards[s][k], off, out, a.seed);
        });
    if (!st.ok()) return ReportError(st);
    std::printf("  %s (%zu tensors) written, %.1f s\n", name, specs.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
  auto write_json = [&](const char* file, const json& j) {
    std::ofstream f(dir / file);
    f << j.dump(2) << "\n";
    f.close();
    return f ? Status::Ok() : IoError((dir / file).string() + ": write failed");
  };
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  if (Status s = write_json(engine::kCheckpointIndexFile, index); !s.ok()) return ReportError(s);
  if (Status s = write_json("config.json", config); !s.ok()) return ReportError(s);
  if (dream) {
    // Dream-v0-Instruct-7B's generation_config.json ids (its sampling keys are not read).
    const json gen = {{"bos_token_id", 151643}, {"eos_token_id", 151643}, {"pad_token_id", 151643}};
    if (Status s = write_json("generation_config.json", gen); !s.ok()) return ReportError(s);
  }
  std::printf("done: %s in %.1f s\n", FormatBytes(total).c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace tediserve::cli
