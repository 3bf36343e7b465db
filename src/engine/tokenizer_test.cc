#include "engine/tokenizer.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"

namespace tediserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

// The tiny model's format: specials 0-2, then single characters.
json CharTokenizer(const std::string& chars = "0123456789+=<|> ab") {
  json vocab = {{"<|eos|>", 0}, {"<|mask|>", 1}, {"<|unk|>", 2}};
  int id = 3;
  for (char c : chars) vocab[std::string(1, c)] = id++;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 0}, {"content", "<|eos|>"}, {"special", true}},
            {{"id", 1}, {"content", "<|mask|>"}, {"special", true}},
            {{"id", 2}, {"content", "<|unk|>"}, {"special", true}}}},
          {"pre_tokenizer",
           {{"type", "Split"}, {"pattern", {{"String", ""}}}, {"behavior", "Isolated"}}},
          {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<|unk|>"}}}};
}

Tokenizer Make(const json& j) {
  StatusOr<Tokenizer> t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

void ExpectJsonError(const json& j, StatusCode code, const std::string& what) {
  StatusOr<Tokenizer> t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status().ToString();
  EXPECT_THAT(t.status().message(), HasSubstr(what));
}

TEST(TokenizerTest, EncodesCharactersAndLiteralSpecialTokens) {
  const Tokenizer tok = Make(CharTokenizer());
  EXPECT_EQ(tok.vocab_size(), 21);
  EXPECT_EQ(tok.eos_id(), 0);
  EXPECT_EQ(tok.TokenToId("<|mask|>"), 1);
  EXPECT_EQ(tok.TokenToId("z"), std::nullopt);
  EXPECT_TRUE(tok.IsSpecial(1));
  EXPECT_FALSE(tok.IsSpecial(3));

  // '1' = 4, '2' = 5, '+' = 13, '=' = 14.
  EXPECT_THAT(*tok.Encode("12+2="), ElementsAre(4, 5, 13, 5, 14));
  // "<|mask|>" is one token although '<', '|', '>' are also in the vocabulary.
  EXPECT_THAT(*tok.Encode("1<|mask|><|eos|>"), ElementsAre(4, 1, 0));
  // A prefix of a special token falls back to characters.
  EXPECT_THAT(*tok.Encode("<|a"), ElementsAre(15, 16, 19));
  EXPECT_TRUE(tok.Encode("")->empty());
}

TEST(TokenizerTest, UnknownCharacterIsAnErrorWithOffset) {
  const Tokenizer tok = Make(CharTokenizer());
  StatusOr<std::vector<int32_t>> ids = tok.Encode("12x3");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(),
            "character 'x' (U+0078) at byte offset 2 is not in the tokenizer vocabulary");

  ids = tok.Encode("1\xC3\xA9");  // 'é', two bytes
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("'\xC3\xA9' (U+00E9) at byte offset 1"));

  ids = tok.Encode("1\n");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("character U+000A at byte offset 1"));

  ids = tok.Encode("12\xFF");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("invalid UTF-8 byte 0xFF at byte offset 2"));
}

TEST(TokenizerTest, DecodeSkipsSpecialsAndStopsAtEos) {
  const Tokenizer tok = Make(CharTokenizer());
  const std::vector<int32_t> ids = {4, 1, 5, 13, 2, 5, 0, 6, 0};
  EXPECT_EQ(tok.Decode(ids), "12+2");            // stops at eos, masks/unk dropped
  EXPECT_EQ(tok.Decode(ids, -1), "12+23");       // no stop: specials still skipped
  EXPECT_EQ(tok.Decode(ids, /*stop_id=*/13), "12");
  EXPECT_EQ(tok.Decode({4, 999, -3, 5}, -1), "1\xEF\xBF\xBD\xEF\xBF\xBD" "2");
  EXPECT_EQ(tok.Decode({}), "");
}

TEST(TokenizerTest, RoundTrip) {
  const Tokenizer tok = Make(CharTokenizer());
  const std::string text = "ab 12+34=46";
  EXPECT_EQ(tok.Decode(*tok.Encode(text)), text);
}

TEST(TokenizerTest, NonSpecialAddedTokenDecodes) {
  json j = CharTokenizer("ab");
  j["added_tokens"].push_back({{"id", 5}, {"content", "ab"}, {"special", false}});
  const Tokenizer tok = Make(j);
  EXPECT_THAT(*tok.Encode("aab"), ElementsAre(3, 5));
  EXPECT_EQ(tok.Decode({3, 5}), "aab");
  EXPECT_EQ(tok.vocab_size(), 6);
}

TEST(TokenizerTest, NoEosTokenMeansNoStop) {
  json j = CharTokenizer("ab");
  j["added_tokens"] = json::array();
  j["model"]["vocab"].erase("<|eos|>");
  const Tokenizer tok = Make(j);
  EXPECT_EQ(tok.eos_id(), -1);
  EXPECT_EQ(tok.Decode({3, 0, 4}), "a\xEF\xBF\xBD" "b");
}

TEST(TokenizerTest, OtherModelTypesAreUnimplemented) {
  json j = CharTokenizer();
  j["model"]["type"] = "Unigram";
  ExpectJsonError(j, StatusCode::kUnimplemented,
                  "tokenizer model type 'Unigram' is not supported (supported: WordLevel, BPE)");
  j = CharTokenizer();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "pre_tokenizer");
  j = CharTokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "normalizer");
  j = CharTokenizer();
  j["normalizer"] = nullptr;  // null is "none"
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
}

TEST(TokenizerTest, MalformedFiles) {
  ExpectJsonError(json::array(), StatusCode::kInvalidArgument, "not a JSON object");
  json j = CharTokenizer();
  j.erase("model");
  ExpectJsonError(j, StatusCode::kInvalidArgument, "'model'");
  j = CharTokenizer();
  j["model"]["vocab"]["a"] = 3;  // '0' already has id 3
  ExpectJsonError(j, StatusCode::kInvalidArgument, "both have id 3");
  j = CharTokenizer();
  j["model"]["vocab"]["a"] = -1;
  ExpectJsonError(j, StatusCode::kInvalidArgument, "token 'a' has id -1");
  j = CharTokenizer();
  j["model"]["vocab"]["a"] = 1 << 30;
  ExpectJsonError(j, StatusCode::kInvalidArgument, "token 'a'");
  j = CharTokenizer();
  j["added_tokens"][1]["id"] = 7;  // the vocab says "<|mask|>" is 1
  ExpectJsonError(j, StatusCode::kInvalidArgument, "'<|mask|>' has ids 1 and 7");
  j = CharTokenizer();
  j["added_tokens"][0].erase("content");
  ExpectJsonError(j, StatusCode::kInvalidArgument, "added_tokens");
  StatusOr<Tokenizer> t = Tokenizer::FromJson("{not json");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  // Deep nesting anywhere is refused before parsing; messages never dump the value.
  t = Tokenizer::FromJson(R"({"normalizer":)" + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("nested deeper than"));
  j = CharTokenizer();
  j["model"]["vocab"][std::string(5000, 'x')] = 40;
  ExpectJsonError(j, StatusCode::kInvalidArgument, "5000 bytes long");
  j = CharTokenizer();
  j["added_tokens"][0]["id"] = 1e300;
  ExpectJsonError(j, StatusCode::kInvalidArgument, "added_tokens[0]");
  std::string dup = CharTokenizer().dump();
  const size_t vocab = dup.find("\"vocab\":{") + 9;
  dup.insert(vocab, "\"a\":44,\"a\":45,");
  t = Tokenizer::FromJson(dup);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("key 'a' appears twice"));
}

TEST(TokenizerTest, FromFile) {
  TempDir dir("tedi_tokenizer_test");
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.File("tokenizer.json");
  std::ofstream(path) << CharTokenizer().dump(2);
  StatusOr<Tokenizer> tok = Tokenizer::FromFile(path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_THAT(*tok->Encode("42"), ElementsAre(7, 5));

  StatusOr<Tokenizer> missing = Tokenizer::FromFile(dir.File("absent.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.File("absent.json")));

  const std::string bad = dir.File("bad.json");
  std::ofstream(bad) << "garbage";
  StatusOr<Tokenizer> garbage = Tokenizer::FromFile(bad);
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(), HasSubstr(bad));
}

}  // namespace
}  // namespace tediserve::engine
