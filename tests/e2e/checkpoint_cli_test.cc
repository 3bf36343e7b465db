// End-to-end tests of real-layout checkpoints through the `tediserve` binary (issue 16 items
// 3 and 5): `make-checkpoint` writes the published LLaDA / Dream layout (config.json as
// published, sharded bf16 safetensors, model.safetensors.index.json) at test dimensions,
// `bench --large` loads and runs it; broken folders (a missing shard, an index naming absent
// tensors, a truncated shard, a dtype or shape mismatch, an unknown tokenizer model or
// pre-tokenizer) end in exit 2 with a message naming the problem.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "e2e/cli_runner.h"
#include "engine/safetensors.h"

namespace tediserve {
namespace {

using namespace e2e;  // NOLINT: the runner helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;

// A checkpoint written by `make-checkpoint --preset PRESET` into a fresh folder, small
// shards so the index spans several files.
class MadeCheckpoint {
 public:
  explicit MadeCheckpoint(const std::string& preset) {
    result = RunCli({"make-checkpoint", "--preset", preset, "--out", dir(), "--shard-gb", "0.01", "--force"});
  }
  std::string dir() const { return dir_.path().string(); }
  std::string File(const std::string& name) const { return dir_.File(name); }
  json Index() const { return json::parse(ReadFile(File("model.safetensors.index.json"))); }
  RunResult result;

 private:
  TempDir dir_{"tedi_made_ckpt"};
};

RunResult Bench(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"bench",        "--large", "--model", dir, "--step-tokens", "64", "--recompute-reps",
                                "1",            "--cache-reps", "1",   "--gen-length", "32", "--block-size", "16"};
  a.insert(a.end(), extra.begin(), extra.end());
  return RunCli(a);
}

TEST(CheckpointCli, LLaDALayoutWritesLoadsAndRuns) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  const json config = json::parse(ReadFile(ck.File("config.json")));
  EXPECT_EQ(config["model_type"], "llada");
  EXPECT_EQ(config["mask_token_id"], 126336);
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  const json index = ck.Index();
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  EXPECT_TRUE(index["weight_map"].contains("model.transformer.blocks.1.ff_proj.weight"));
  EXPECT_TRUE(index["weight_map"].contains("model.transformer.ff_out.weight"));
  uint64_t bytes = 0;
  for (const std::string& s : shards) bytes += fs::file_size(ck.File(s));
  EXPECT_GT(bytes, index["metadata"]["total_size"].get<uint64_t>());  // + headers

  TempDir out("tedi_bench_json");
  RunResult r = Bench(ck.dir(), {"--json", out.File("b.json"), "--layout", "mapped"});
  ASSERT_EQ(r.code(), 0) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("mapped layout"));
  EXPECT_THAT(r.out, HasSubstr("recompute step (64 tokens)"));
  EXPECT_THAT(r.out, HasSubstr("cache step (16 tokens)"));
  const json b = json::parse(ReadFile(out.File("b.json")));
  EXPECT_EQ(b["recompute_tokens"], 64);
  EXPECT_EQ(b["cache_tokens"], 16);
  EXPECT_GT(b["mapped_bytes"].get<uint64_t>(), 2ull * 126464 * 64 * 2 - 1);  // embedding + head in bf16
  EXPECT_GT(b["recompute_gflops"].get<double>(), 0.0);
  EXPECT_GT(b["sgemm_recompute_shapes"]["wall_gflops"].get<double>(), 0.0);
}

TEST(CheckpointCli, DreamLayoutRunsWithShiftedLogits) {
  MadeCheckpoint ck("dream-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  EXPECT_TRUE(ck.Index()["weight_map"].contains("model.layers.0.self_attn.k_proj.bias"));
  EXPECT_TRUE(fs::exists(ck.File("generation_config.json")));
  RunResult r = Bench(ck.dir());
  ASSERT_EQ(r.code(), 0) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("7 heads (1 kv)"));
  // Dream's cache step pushes the block and the position before it (its logits are shifted).
  EXPECT_THAT(r.out, HasSubstr("cache step (17 tokens)"));
}

TEST(CheckpointCli, MissingShard) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  const std::string shard = ck.Index()["weight_map"]["model.transformer.blocks.0.up_proj.weight"];
  fs::remove(ck.File(shard));
  RunResult r = Bench(ck.dir());
  ExpectBadInput(r, "names shard '" + shard + "'");
  EXPECT_THAT(r.err, HasSubstr("does not exist")) << r.Describe();
}

TEST(CheckpointCli, IndexNamesAbsentTensor) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  json index = ck.Index();
  const std::string shard = index["weight_map"]["model.transformer.wte.weight"];
  index["weight_map"]["model.transformer.blocks.9.q_proj.weight"] = shard;
  WriteFile(ck.File("model.safetensors.index.json"), index.dump());
  ExpectBadInput(Bench(ck.dir()), "maps tensor 'model.transformer.blocks.9.q_proj.weight'");
}

TEST(CheckpointCli, TruncatedShard) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  const std::string shard = ck.File(ck.Index()["weight_map"]["model.transformer.ln_f.weight"]);
  fs::resize_file(shard, fs::file_size(shard) - 1);
  RunResult r = Bench(ck.dir());
  ExpectBadInput(r, "truncated");
  EXPECT_THAT(r.err, HasSubstr(shard)) << r.Describe();
}

TEST(CheckpointCli, DtypeAndShapeMismatch) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  const std::string name = "model.transformer.blocks.1.attn_norm.weight";
  const json index = ck.Index();
  const std::string shard = index["weight_map"][name];
  // Rewrite that shard with every tensor as it was, except `name` as I32 (same shape), then
  // with a wrong shape.
  auto rewrite = [&](engine::DType dtype, std::vector<int64_t> shape) {
    std::vector<engine::TensorToWrite> tensors;
    {
      auto file = engine::SafetensorsFile::Open(ck.File(shard));
      ASSERT_TRUE(file.ok()) << file.status().ToString();
      for (const std::string& t : file->names()) {
        if (t == name) {
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          if (dtype == engine::DType::kI32)
            tensors.push_back({t, dtype, shape, {}, std::vector<int64_t>(n, 1)});
          else
            tensors.push_back({t, dtype, shape, std::vector<float>(n, 1.0f), {}});
          continue;
        }
        auto values = file->ReadFloat(t);
        ASSERT_TRUE(values.ok());
        tensors.push_back({t, file->Find(t)->dtype, file->Find(t)->shape, *values, {}});
      }
    }
    ASSERT_TRUE(engine::WriteSafetensors(ck.File(shard), tensors).ok());
  };
  rewrite(engine::DType::kI32, {64});
  RunResult r = Bench(ck.dir());
  ExpectBadInput(r, "'" + name + "' has dtype I32");
  rewrite(engine::DType::kBF16, {32, 2});
  ExpectBadInput(Bench(ck.dir()), "'" + name + "' has shape [32,2] but config.json implies [64]");
}

TEST(CheckpointCli, BadMakeCheckpointFlags) {
  TempDir tmp("tedi_make_ckpt_flags");
  WriteFile(tmp.File("file"), "x");
  ExpectBadInput(RunCli({"make-checkpoint", "--out", tmp.File("file")}), "is not a folder");
  fs::create_directories(tmp.File("nonempty"));
  WriteFile(tmp.File("nonempty/x"), "x");
  ExpectBadInput(RunCli({"make-checkpoint", "--out", tmp.File("nonempty")}), "not empty");
  ExpectBadInput(RunCli({"make-checkpoint", "--preset", "gpt2", "--out", tmp.File("a")}), "--preset");
  ExpectBadInput(RunCli({"make-checkpoint", "--dtype", "f64", "--out", tmp.File("a")}), "--dtype");
  ExpectBadInput(RunCli({"make-checkpoint", "--shard-gb", "0", "--out", tmp.File("a")}), "--shard-gb");
  ExpectBadInput(RunCli({"bench", "--large", "--step-tokens", "1"}), "--step-tokens");
  ExpectBadInput(RunCli({"bench", "--large", "--layout", "fused"}), "--layout");
}

TEST(CheckpointCli, BenchLargeStepLongerThanContext) {
  MadeCheckpoint ck("llada-test");
  ASSERT_EQ(ck.result.code(), 0) << ck.result.Describe();
  ExpectBadInput(RunCli({"bench", "--large", "--model", ck.dir(), "--step-tokens", "300"}), "--step-tokens 300");
}

// A model folder whose tokenizer.json the engine cannot read: refused by name, exit 2.
TEST(CheckpointCli, UnknownTokenizerModelOrPreTokenizer) {
  TempDir m("tedi_tok_model");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(RealModelDir() / f, m.path() / f);
  json tok = json::parse(ReadFile(m.File("tokenizer.json")));
  json unigram = tok;
  unigram["model"]["type"] = "Unigram";
  WriteFile(m.File("tokenizer.json"), unigram.dump());
  ExpectBadInput(RunCli({"generate", "--model", m.path().string(), "1+1="}),
                 "tokenizer model type 'Unigram' is not supported");
  json meta = tok;
  meta["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  WriteFile(m.File("tokenizer.json"), meta.dump());
  ExpectBadInput(RunCli({"generate", "--model", m.path().string(), "1+1="}), "pre_tokenizer");
}

}  // namespace
}  // namespace tediserve
