// End-to-end tests of the `tediserve` binary: each test runs the real executable as a child
// process (posix_spawn, no shell), captures its stdout and stderr, and checks the exit status
// and what it printed. A child that runs past its deadline is killed and the test fails, so
// a hang cannot block CI.
//
// Bad input must end in a normal exit (no signal) with a non-zero code (the CLI uses 2) and a
// message on stderr that names the problem.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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


// A throwaway copy of the model folder, for tests that break one of its files. The copy is
// also a snapshot: the bundled model may be rewritten while the tests run.
class ModelCopy {
 public:
  ModelCopy() {
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "heldout.jsonl"})
      fs::copy_file(RealModelDir() / f, dir_.path() / f, fs::copy_options::overwrite_existing);
  }
  std::string dir() const { return dir_.path().string(); }
  std::string File(const std::string& name) const { return dir_.File(name); }

 private:
  TempDir dir_{"tedi_cli_model"};
};

// One snapshot of the bundled model shared by the happy-path tests of this process.
const ModelCopy& Snapshot() {
  static const ModelCopy copy;
  return copy;
}

std::vector<std::string> Gen(std::vector<std::string> extra) {
  std::vector<std::string> a = {"generate", "--model", Snapshot().dir()};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// --- bad model folders ------------------------------------------------------------------

TEST(CliBadModel, FolderDoesNotExist) {
  TempDir tmp("tedi_cli_missing");
  const std::string missing = tmp.File("no-such-model");
  RunResult r = RunCli({"generate", "--model", missing, "1+1="});
  ExpectBadInput(r, "does not exist");
  EXPECT_THAT(r.err, HasSubstr(missing)) << r.Describe();
}

TEST(CliBadModel, SafetensorsMissing) {
  ModelCopy m;
  fs::remove(m.File("model.safetensors"));
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "no *.safetensors files");
}

TEST(CliBadModel, TruncatedSafetensors) {
  ModelCopy m;
  const std::string st = m.File("model.safetensors");
  fs::resize_file(st, fs::file_size(st) / 2);
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "model.safetensors");
  EXPECT_THAT(r.err, HasSubstr("past the end")) << r.Describe();
}

TEST(CliBadModel, GarbageHeaderLength) {
  ModelCopy m;
  const std::string st = m.File("model.safetensors");
  {
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t garbage = 0x7fffffffffffff00ULL;  // far larger than the file
    f.write(reinterpret_cast<const char*>(&garbage), sizeof garbage);
  }
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "header length");
  EXPECT_THAT(r.err, HasSubstr("model.safetensors")) << r.Describe();
}

TEST(CliBadModel, HeaderNotJson) {
  ModelCopy m;
  const std::string st = m.File("model.safetensors");
  {
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("#!garbage", 9);  // the header's first bytes
  }
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "not valid JSON");
}

TEST(CliBadModel, ConfigShapeMismatch) {
  ModelCopy m;
  auto cfg = nlohmann::json::parse(ReadFile(m.File("config.json")));
  ASSERT_NE(cfg["d_model"].get<int>(), 64);
  cfg["d_model"] = 64;
  WriteFile(m.File("config.json"), cfg.dump(1));
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "has shape");
}

TEST(CliBadModel, TensorWithWrongShape) {
  ModelCopy m;
  auto cfg = nlohmann::json::parse(ReadFile(m.File("config.json")));
  const int d = cfg["d_model"].get<int>();
  // Rewrite the checkpoint with every tensor as stored but the final norm one element short.
  std::vector<engine::TensorToWrite> tensors;
  {
    auto f = engine::SafetensorsFile::Open(m.File("model.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    bool found = false;
    for (const std::string& name : f->names()) {
      const engine::TensorInfo* info = f->Find(name);
      auto data = f->ReadFloat(name);
      ASSERT_TRUE(data.ok()) << data.status().ToString();
      engine::TensorToWrite t{name, engine::DType::kF32, info->shape, std::move(data).value(), {}};
      if (name.find("ln_f") != std::string::npos) {
        ASSERT_EQ(t.shape, std::vector<int64_t>{d});
        t.shape = {d - 1};
        t.floats.resize(d - 1);
        found = true;
      }
      tensors.push_back(std::move(t));
    }
    ASSERT_TRUE(found) << "no final norm (ln_f) tensor in the checkpoint";
  }
  ASSERT_TRUE(engine::WriteSafetensors(m.File("model.safetensors"), tensors).ok());
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "ln_f");
  EXPECT_THAT(r.err, HasSubstr("has shape")) << r.Describe();
}

TEST(CliBadModel, UnknownArchitecture) {
  ModelCopy m;
  auto cfg = nlohmann::json::parse(ReadFile(m.File("config.json")));
  cfg["architectures"] = {"GPT2LMHeadModel"};
  cfg["model_type"] = "gpt2";
  WriteFile(m.File("config.json"), cfg.dump(1));
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "unknown architecture 'GPT2LMHeadModel'");
  EXPECT_THAT(r.err, HasSubstr("config.json")) << r.Describe();
}

TEST(CliBadModel, ConfigNotJson) {
  ModelCopy m;
  WriteFile(m.File("config.json"), "{\"d_model\": 96,");
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "not valid JSON");
  EXPECT_THAT(r.err, HasSubstr("config.json")) << r.Describe();
}

TEST(CliBadModel, TokenizerMissing) {
  ModelCopy m;
  fs::remove(m.File("tokenizer.json"));
  RunResult r = RunCli({"generate", "--model", m.dir(), "1+1="});
  ExpectBadInput(r, "tokenizer.json");
}

// --- bad generate arguments -------------------------------------------------------------

TEST(CliGenerate, PromptLongerThanContext) {
  RunResult r = RunCli(Gen({std::string(300, '7')}));
  ExpectBadInput(r, "exceeds the model's context of 256");
}

TEST(CliGenerate, ThresholdOutOfRange) {
  for (const char* th : {"0", "1.5", "-1", "nan", "inf"}) {
    SCOPED_TRACE(std::string("--threshold ") + th);
    RunResult r = RunCli(Gen({"12+7=", std::string("--threshold=") + th}));
    ExpectBadInput(r, "(0, 1]");
  }
}

// 0 must not silently mean "the model's default" (the default is what omitting the flag
// gives).
TEST(CliGenerate, GenLengthOrBlockSizeZero) {
  ExpectBadInput(RunCli(Gen({"12+7=", "--gen-length", "0"})), "--gen-length: Value 0 not in range 1 to");
  ExpectBadInput(RunCli(Gen({"12+7=", "--block-size", "0"})), "--block-size: Value 0 not in range 1 to");
}

TEST(CliGenerate, NegativeGenLengthAndBlockSize) {
  ExpectBadInput(RunCli(Gen({"12+7=", "--gen-length", "-8"})), "--gen-length");
  ExpectBadInput(RunCli(Gen({"12+7=", "--block-size", "-8"})), "--block-size");
}

TEST(CliGenerate, GenLengthNotMultipleOfBlockWithCache) {
  RunResult r = RunCli(Gen({"12+7=", "--gen-length", "12", "--block-size", "8"}));
  ExpectBadInput(r, "multiple");
}

TEST(CliGenerate, GenLengthNotMultipleOfBlockWithoutCacheSucceeds) {
  RunResult r = RunCli(Gen({"12+7=", "--gen-length", "12", "--block-size", "8", "--no-cache"}));
  ExpectSuccess(r);
  EXPECT_THAT(r.err, HasSubstr("tokens")) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("no cache")) << r.Describe();
}

TEST(CliGenerate, CharacterNotInVocabulary) {
  RunResult r = RunCli(Gen({"ABC"}));
  ExpectBadInput(r, "not in the tokenizer vocabulary");
  EXPECT_THAT(r.err, HasSubstr("'A'")) << r.Describe();

  r = RunCli(Gen({"caf\xc3\xa9="}));  // "café="
  ExpectBadInput(r, "not in the tokenizer vocabulary");
  EXPECT_THAT(r.err, HasSubstr("byte offset 3")) << r.Describe();
}

TEST(CliGenerate, MaskTokenInPrompt) {
  RunResult r = RunCli(Gen({"1+<|mask|>="}));
  ExpectBadInput(r, "mask");
}

TEST(CliGenerate, EmptyPrompt) {
  RunResult r = RunCli(Gen({""}));
  ExpectBadInput(r, "empty");
}

TEST(CliGenerate, BadTemperature) {
  ExpectBadInput(RunCli(Gen({"12+7=", "--temperature", "-1"})), "temperature");
  ExpectBadInput(RunCli(Gen({"12+7=", "--temperature", "nan"})), "temperature");
}

TEST(CliGenerate, StepLogUnwritable) {
  TempDir tmp("tedi_cli_log");
  RunResult r = RunCli(Gen({"12+7=", "--step-log", tmp.File("no/such/dir/log.jsonl")}));
  ExpectRunFailure(r, "cannot write step log");
}

// --- bad eval / bench arguments ---------------------------------------------------------

TEST(CliEval, MalformedTasksLine) {
  TempDir tmp("tedi_cli_tasks");
  const std::string tasks = tmp.File("tasks.jsonl");
  WriteFile(tasks, "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n{\"prompt\": \"2+2=\", \"answer\": \n");
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--tasks", tasks, "--thresholds", "0.9"});
  ExpectBadInput(r, tasks + ":2");
}

TEST(CliEval, TasksMissingField) {
  TempDir tmp("tedi_cli_tasks");
  const std::string tasks = tmp.File("tasks.jsonl");
  WriteFile(tasks, "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n\n{\"prompt\": \"2+2=\"}\n");
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--tasks", tasks, "--thresholds", "0.9"});
  ExpectBadInput(r, tasks + ":3");
  EXPECT_THAT(r.err, HasSubstr("answer")) << r.Describe();
}

TEST(CliEval, TasksFileMissing) {
  TempDir tmp("tedi_cli_tasks");
  const std::string tasks = tmp.File("nope.jsonl");
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--tasks", tasks, "--thresholds", "0.9"});
  ExpectBadInput(r, "no such file");
}

TEST(CliEval, BadCacheMode) {
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--cache", "maybe"});
  ExpectBadInput(r, "--cache");
}

TEST(CliEval, BadThreshold) {
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--thresholds", "0.9,0"});
  ExpectBadInput(r, "(0, 1]");
}

TEST(CliEval, BadBatchAndLimit) {
  ExpectBadInput(RunCli({"eval", "--model", Snapshot().dir(), "--batch", "0"}), "--batch");
  ExpectBadInput(RunCli({"eval", "--model", Snapshot().dir(), "--limit", "-1"}), "--limit");
}

TEST(CliEval, GenLengthNotMultipleOfBlock) {
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--limit", "2", "--thresholds", "0.9",
                        "--gen-length", "12", "--block-size", "8"});
  ExpectBadInput(r, "multiple");
}

TEST(CliEval, GenLengthOrBlockSizeZero) {
  ExpectBadInput(RunCli({"eval", "--model", Snapshot().dir(), "--limit", "2", "--thresholds", "0.9",
                         "--gen-length", "0"}),
                 "--gen-length");
  ExpectBadInput(RunCli({"eval", "--model", Snapshot().dir(), "--limit", "2", "--thresholds", "0.9",
                         "--block-size", "0"}),
                 "--block-size");
}

TEST(CliBench, ZeroReps) {
  RunResult r = RunCli({"bench", "--model", Snapshot().dir(), "--reps", "0"});
  ExpectBadInput(r, "--reps");
}

TEST(CliBench, ZeroBatch) {
  RunResult r = RunCli({"bench", "--model", Snapshot().dir(), "--batches", "1,0"});
  ExpectBadInput(r, "--batches: Value 0 not in range 1 to 4096");
}

// A bad --gen-length must not silently become the model's default.
TEST(CliBench, GenLengthNotPositive) {
  for (const char* g : {"0", "-8"}) {
    SCOPED_TRACE(std::string("--gen-length ") + g);
    ExpectBadInput(RunCli({"bench", "--model", Snapshot().dir(), "--reps", "1", "--batches", "1",
                           std::string("--gen-length=") + g}),
                   "--gen-length");
  }
}

// prompt length + gen length must be checked without int overflow: 2147483600 + 64 wraps
// negative, passes the context check, and the bench then allocates a 2^31-token prompt.
TEST(CliBench, HugePromptLength) {
  RunResult r = RunCli({"bench", "--model", Snapshot().dir(), "--reps", "1", "--batches", "1",
                        "--prompt-length", "2147483600", "--gen-length", "64", "--block-size", "8"});
  ExpectBadInput(r, "--prompt-length: Value 2147483600 not in range");  // refused by the flag's bound
}

TEST(CliBench, PromptPlusGenExceedsContext) {
  RunResult r = RunCli({"bench", "--model", Snapshot().dir(), "--prompt-length", "250", "--gen-length", "16",
                        "--block-size", "8"});
  ExpectBadInput(r, "context of 256");
}

// --- command-line parsing ---------------------------------------------------------------

TEST(CliParse, UnknownSubcommand) {
  RunResult r = RunCli({"frobnicate"});
  ASSERT_TRUE(r.exited()) << r.Describe();
  EXPECT_NE(r.code(), 0) << r.Describe();
  // The message must name what was typed, not claim that no subcommand was given.
  EXPECT_THAT(r.err, HasSubstr("frobnicate")) << r.Describe();
}

TEST(CliParse, NoSubcommand) {
  RunResult r = RunCli({});
  ASSERT_TRUE(r.exited()) << r.Describe();
  EXPECT_NE(r.code(), 0) << r.Describe();
  EXPECT_FALSE(r.err.empty()) << r.Describe();
}

TEST(CliParse, UnknownFlag) {
  RunResult r = RunCli(Gen({"12+7=", "--frobnicate"}));
  ASSERT_TRUE(r.exited()) << r.Describe();
  EXPECT_NE(r.code(), 0) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("--frobnicate")) << r.Describe();
}

TEST(CliParse, MissingPrompt) {
  RunResult r = RunCli(Gen({}));
  ASSERT_TRUE(r.exited()) << r.Describe();
  EXPECT_NE(r.code(), 0) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("prompt")) << r.Describe();
}

TEST(CliParse, NonNumericAndOutOfRangeValues) {
  for (std::vector<std::string> args : {Gen({"12+7=", "--threshold", "high"}), Gen({"12+7=", "--tp", "0"}),
                                        Gen({"12+7=", "--gen-length", "lots"})}) {
    SCOPED_TRACE(args.back());
    RunResult r = RunCli(args);
    ASSERT_TRUE(r.exited()) << r.Describe();
    EXPECT_EQ(r.code(), 2) << r.Describe();
    EXPECT_THAT(r.err, HasSubstr(args.back())) << r.Describe();
  }
}

TEST(CliParse, HelpExitsZero) {
  RunResult r = RunCli({"--help"});
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("generate")) << r.Describe();
}

// --- happy paths ------------------------------------------------------------------------

TEST(CliHappy, Generate) {
  // Copying is the bundled model's easiest task (100% on its held-out set).
  RunResult r = RunCli(Gen({"cpy:wxyz="}));
  ExpectSuccess(r);
  const auto out = Lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.Describe();
  EXPECT_EQ(out[0], "wxyz") << r.Describe();
  EXPECT_THAT(r.err, HasSubstr(" steps, 8 tokens")) << r.Describe();  // the model's default gen length
  EXPECT_EQ(r.err.rfind("[", 0), 0u) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr(", cache]")) << r.Describe();
}

// The --trace lines of one run, checked for the fields every step must have.
std::vector<nlohmann::json> TraceSteps(const RunResult& r) {
  std::vector<nlohmann::json> steps;
  for (const std::string& line : Lines(r.err)) {
    if (line.rfind("[", 0) == 0) continue;  // the summary line
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
    if (!j.is_object()) continue;
    EXPECT_TRUE(j.contains("kind") && j["kind"].is_string()) << line;
    EXPECT_TRUE(j.contains("block") && j["block"].is_number_integer()) << line;
    EXPECT_TRUE(j.contains("unmasked") && j["unmasked"].is_array()) << line;
    EXPECT_TRUE(j.contains("done") && j["done"].is_boolean()) << line;
    steps.push_back(std::move(j));
  }
  return steps;
}

TEST(CliHappy, GenerateTrace) {
  RunResult r = RunCli(Gen({"12+7=", "--trace", "--gen-length", "16", "--block-size", "8"}));
  ExpectSuccess(r);
  const auto steps = TraceSteps(r);
  ASSERT_GE(steps.size(), 2u) << r.Describe();  // gen 16 in blocks of 8: at least 2 steps
  EXPECT_EQ(steps.front()["kind"], "recompute");
  std::set<int> positions;
  int last_block = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    EXPECT_TRUE(s["kind"] == "recompute" || s["kind"] == "cache") << s.dump();
    EXPECT_EQ(s["done"].get<bool>(), i + 1 == steps.size()) << s.dump();
    const int block = s["block"].get<int>();
    EXPECT_GE(block, last_block) << s.dump();
    if (block != last_block) {
      EXPECT_EQ(s["kind"], "recompute") << "a new block starts with a recompute step";
    }
    last_block = block;
    EXPECT_FALSE(s["unmasked"].empty()) << "every step unmasks at least one position: " << s.dump();
    for (const auto& u : s["unmasked"]) {
      ASSERT_TRUE(u.is_array() && u.size() == 2) << s.dump();
      const int pos = u[0].get<int>();
      EXPECT_GE(pos, block * 8) << s.dump();
      EXPECT_LT(pos, block * 8 + 8) << s.dump();
      EXPECT_TRUE(positions.insert(pos).second) << "position " << pos << " unmasked twice";
    }
  }
  EXPECT_EQ(last_block, 1);
  EXPECT_EQ(positions.size(), 16u) << "every output position is unmasked exactly once";
  // Built by appending: GCC 12 gives a false -Wrestrict for "[" + std::to_string(...).
  EXPECT_THAT(r.err, HasSubstr(std::string("[").append(std::to_string(steps.size())).append(" steps")))
      << r.Describe();

  RunResult nc = RunCli(Gen({"12+7=", "--trace", "--no-cache", "--gen-length", "16", "--block-size", "8"}));
  ExpectSuccess(nc);
  const auto nsteps = TraceSteps(nc);
  ASSERT_GE(nsteps.size(), 2u) << nc.Describe();
  for (const auto& s : nsteps) EXPECT_EQ(s["kind"], "recompute") << s.dump();
  EXPECT_TRUE(nsteps.back()["done"].get<bool>());
}

TEST(CliHappy, StepLogMatchesTrace) {
  TempDir tmp("tedi_cli_log");
  const std::string log = tmp.File("steps.jsonl");
  RunResult r = RunCli(Gen({"12+7=", "--trace", "--step-log", log}));
  ExpectSuccess(r);
  auto traced = Lines(r.err);
  traced.pop_back();  // the summary line
  const auto logged = Lines(ReadFile(log));
  ASSERT_EQ(logged.size(), traced.size());
  for (size_t i = 0; i < logged.size(); ++i) EXPECT_EQ(logged[i], traced[i]);
}

TEST(CliHappy, TensorParallelSameOutput) {
  RunResult tp1 = RunCli(Gen({"12+7=", "--tp", "1"}));
  RunResult tp2 = RunCli(Gen({"12+7=", "--tp", "2"}));
  ExpectSuccess(tp1);
  ExpectSuccess(tp2);
  EXPECT_FALSE(tp1.out.empty());
  EXPECT_EQ(tp1.out, tp2.out) << "tp1: " << tp1.Describe() << "\ntp2: " << tp2.Describe();
}

TEST(CliHappy, Eval) {
  TempDir tmp("tedi_cli_eval");
  const std::string json_path = tmp.File("out.json");
  RunResult r = RunCli({"eval", "--model", Snapshot().dir(), "--gen-length", "16", "--block-size", "8", "--limit", "20", "--thresholds", "0.9,0.5", "--json",
                        json_path});
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("threshold")) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("accuracy")) << r.Describe();

  auto j = nlohmann::json::parse(ReadFile(json_path), nullptr, false);
  ASSERT_TRUE(j.is_object()) << ReadFile(json_path);
  EXPECT_EQ(j["problems"], 20);
  ASSERT_TRUE(j["rows"].is_array());
  ASSERT_EQ(j["rows"].size(), 4u) << j.dump(1);
  std::set<std::pair<bool, double>> seen;
  for (const auto& row : j["rows"]) {
    SCOPED_TRACE(row.dump());
    const bool cache = row.at("cache").get<bool>();
    const double th = row.at("threshold").get<double>();
    seen.insert({cache, th});
    const double acc = row.at("accuracy").get<double>();
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    EXPECT_GE(row.at("mean_steps").get<double>(), 2.0);  // 2 blocks of 8 for gen length 16
    EXPECT_LE(row.at("mean_steps").get<double>(), 16.0);
    if (cache) {
      ASSERT_TRUE(row.contains("same_answer_as_nocache"));
      const double same = row["same_answer_as_nocache"].get<double>();
      EXPECT_GE(same, 0.0);
      EXPECT_LE(same, 1.0);
    } else {
      EXPECT_FALSE(row.contains("same_answer_as_nocache"));
    }
  }
  EXPECT_EQ(seen, (std::set<std::pair<bool, double>>{{false, 0.9}, {false, 0.5}, {true, 0.9}, {true, 0.5}}));
}

}  // namespace
}  // namespace tediserve
