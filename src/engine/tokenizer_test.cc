#include "engine/tokenizer.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "engine/tokenizer_bpe.h"

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


// --- byte-level BPE (the real Qwen file is compared with the reference implementation in
// tests/e2e/tokenizer_reference_test.cc; these are the rules on a small vocabulary)

// The GPT-2 byte -> character map, as tokenizer.json files spell byte-level tokens.
std::string ByteChar(int b) {
  int n = 0;
  for (int k = 0; k < 256; ++k) {
    const bool printable = (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE);
    const int cp = printable ? k : 256 + n++;
    if (k == b) return cp < 0x80 ? std::string(1, static_cast<char>(cp))
                                 : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return "";
}

// Ids 0-255: the bytes; then "bc" 256, "abc" 257, "ab" 258, "aa" 259, "Ġb" 260; added
// "<|x|>" 300 (special) and "<y>" 301.
json ByteBpe(bool string_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  vocab["bc"] = 256;
  vocab["abc"] = 257;
  vocab["ab"] = 258;
  vocab["aa"] = 259;
  vocab[ByteChar(' ') + "b"] = 260;
  const std::vector<std::pair<std::string, std::string>> pairs = {{"b", "c"}, {"a", "bc"}, {"a", "b"}, {"a", "a"}, {ByteChar(' '), "b"}};
  json merges = json::array();
  for (const auto& [a, b] : pairs) merges.push_back(string_merges ? json(a + " " + b) : json::array({a, b}));
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 300}, {"content", "<|x|>"}, {"special", true}, {"normalized", false}},
            {{"id", 301}, {"content", "<y>"}, {"special", false}, {"normalized", false}}}},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", "(?i:'s)| ?\\p{L}+|\\p{N}|\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"dropout", nullptr}, {"unk_token", nullptr}}}};
}

TEST(BpeTokenizerTest, MergesByRankThenLeftmost) {
  const Tokenizer tok = Make(ByteBpe());
  EXPECT_EQ(tok.model_type(), "BPE");
  // "abc": (b,c) has rank 0, before (a,b) rank 2; then (a,bc) makes "abc".
  EXPECT_THAT(*tok.Encode("abc"), ElementsAre(257));
  EXPECT_THAT(*tok.Encode("abab"), ElementsAre(258, 258));
  EXPECT_THAT(*tok.Encode("aaa"), ElementsAre(259, 'a'));  // leftmost pair first
  // The Split regex isolates " b" (a space joins the following letters); "'S" is its own piece.
  EXPECT_THAT(*tok.Encode("a b"), ElementsAre('a', 260));
  EXPECT_THAT(*tok.Encode("x'S"), ElementsAre('x', '\'', 'S'));
  EXPECT_TRUE(tok.Encode("")->empty());
  // Merges written as "a b" strings give the same tokenizer.
  const Tokenizer strings = Make(ByteBpe(true));
  for (const char* text : {"abc abab aaa", "bcbc a b", "zzz"}) EXPECT_EQ(*tok.Encode(text), *strings.Encode(text)) << text;
}

TEST(BpeTokenizerTest, AddedTokensSplitFirstAndDecode) {
  const Tokenizer tok = Make(ByteBpe());
  EXPECT_THAT(*tok.Encode("ab<|x|>ab<y>"), ElementsAre(258, 300, 258, 301));
  EXPECT_THAT(*tok.Encode("<|x|"), ElementsAre('<', '|', 'x', '|'));
  EXPECT_EQ(tok.DecodeAll({258, 300, 258, 301}), "ab<|x|>ab<y>");
  EXPECT_EQ(tok.DecodeAll({258, 300, 258, 301}, /*skip_special_tokens=*/true), "abab<y>");
  EXPECT_EQ(tok.Decode({258, 300, 258}, 300), "ab");  // stops at the stop id
  // "é" is 0xC3 0xA9: split by an added token, each half is ill-formed (U+FFFD); a skipped
  // special token does not split it (the reference filters specials before decoding).
  EXPECT_EQ(tok.DecodeAll({0xC3, 301, 0xA9}), "\xEF\xBF\xBD<y>\xEF\xBF\xBD");
  EXPECT_EQ(tok.DecodeAll({0xC3, 300, 0xA9}, true), "\xC3\xA9");
  EXPECT_EQ(tok.DecodeAll({0xC3, 300, 0xA9}), "\xEF\xBF\xBD<|x|>\xEF\xBF\xBD");
  EXPECT_EQ(tok.DecodeAll({258, 299, -1}), "ab\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_FALSE(tok.HasId(299));
  EXPECT_TRUE(tok.HasId(301));
}

TEST(BpeTokenizerTest, NfcAndInvalidUtf8) {
  const Tokenizer tok = Make(ByteBpe());
  // "e" + U+0301 is NFC "é" (0xC3 0xA9); U+212B ANGSTROM SIGN is NFC U+00C5.
  EXPECT_THAT(*tok.Encode("e\xCC\x81"), ElementsAre(0xC3, 0xA9));
  EXPECT_THAT(*tok.Encode("\xE2\x84\xAB"), ElementsAre(0xC3, 0x85));
  // Ill-formed UTF-8 is U+FFFD (EF BF BD), one per maximal subpart.
  EXPECT_EQ(*tok.Encode("a\xFF"), *tok.Encode("a\xEF\xBF\xBD"));
  EXPECT_EQ(*tok.Encode("\xE2\x82z"), *tok.Encode("\xEF\xBF\xBDz"));
  EXPECT_EQ(ReplaceInvalidUtf8("\xE2\x82"), "\xEF\xBF\xBD");
  EXPECT_EQ(ReplaceInvalidUtf8("\xF0\x9F\x98" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(ReplaceInvalidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(ReplaceInvalidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(ReplaceInvalidUtf8("\xF4\x90\x80\x80"), std::string(4 * 3, ' ').replace(0, 12, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_EQ(ReplaceInvalidUtf8("ok \xC3\xA9 \xF0\x9F\x99\x82"), "ok \xC3\xA9 \xF0\x9F\x99\x82");
}

TEST(BpeTokenizerTest, TemplateAndIgnoreMerges) {
  json j = ByteBpe();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|x|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<|x|>", {{"id", "<|x|>"}, {"ids", {300}}, {"tokens", {"<|x|>"}}}}}}};
  j["model"]["ignore_merges"] = true;
  j["model"]["vocab"]["aaa"] = 261;  // no merge makes it; ignore_merges takes the word whole
  const Tokenizer tok = Make(j);
  EXPECT_THAT(*tok.Encode("ab", /*add_special_tokens=*/true), ElementsAre(300, 258));
  EXPECT_THAT(*tok.Encode("ab"), ElementsAre(258));
  EXPECT_THAT(*tok.Encode("aaa"), ElementsAre(261));
}

TEST(BpeTokenizerTest, UnsupportedPartsAreNamed) {
  json j = ByteBpe();
  j["model"]["type"] = "WordPiece";
  ExpectJsonError(j, StatusCode::kUnimplemented, "tokenizer model type 'WordPiece' is not supported");
  j = ByteBpe();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "normalizer type 'Lowercase' is not supported");
  j = ByteBpe();
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "pre_tokenizer type 'Whitespace' is not supported");
  j = ByteBpe();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "pre_tokenizer type 'Metaspace'");
  j = ByteBpe();
  j["pre_tokenizer"] = nullptr;
  ExpectJsonError(j, StatusCode::kUnimplemented, "without a ByteLevel pre_tokenizer");
  j = ByteBpe();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  ExpectJsonError(j, StatusCode::kUnimplemented, "behavior 'MergedWithPrevious'");
  j = ByteBpe();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "decoder type 'WordPiece'");
  j = ByteBpe();
  j["post_processor"] = {{"type", "BertProcessing"}};
  ExpectJsonError(j, StatusCode::kUnimplemented, "post_processor type 'BertProcessing'");
  j = ByteBpe();
  j["model"]["byte_fallback"] = true;
  ExpectJsonError(j, StatusCode::kUnimplemented, "byte_fallback");
  j = ByteBpe();
  j["added_tokens"][0]["lstrip"] = true;
  ExpectJsonError(j, StatusCode::kUnimplemented, "'lstrip': true");
  j = ByteBpe();
  j["normalizer"] = {{"kind", "NFC"}};
  ExpectJsonError(j, StatusCode::kInvalidArgument, "has no string 'type'");
  // Regex constructs whose meaning differs between engines are refused by name.
  for (const auto& [pattern, shown] : std::vector<std::pair<std::string, std::string>>{
           {"\\w+", "\\w"}, {"a++", "++"}, {"^a", "^"}, {"(?>a)", "(?>"}, {"[[a]]", "["}, {"\\bx", "\\b"}}) {
    j = ByteBpe();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    ExpectJsonError(j, StatusCode::kUnimplemented, "regex construct '" + shown + "'");
  }
  j = ByteBpe();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a";
  ExpectJsonError(j, StatusCode::kInvalidArgument, "does not compile");
}

TEST(BpeTokenizerTest, MalformedBpe) {
  json j = ByteBpe();
  j["model"]["merges"].push_back(json::array({"q", "zz"}));
  ExpectJsonError(j, StatusCode::kInvalidArgument, "token 'zz' is not in the vocabulary");
  j = ByteBpe();
  j["model"]["merges"].push_back(json::array({"q", "r"}));  // "qr" is not a token
  ExpectJsonError(j, StatusCode::kInvalidArgument, "token 'qr' is not in the vocabulary");
  j = ByteBpe(true);
  j["model"]["merges"].push_back("a b c");
  ExpectJsonError(j, StatusCode::kInvalidArgument, "is not two tokens separated by one space");
  j = ByteBpe();
  j["model"]["merges"].push_back(7);
  ExpectJsonError(j, StatusCode::kInvalidArgument, "merges[5]");
  j = ByteBpe();
  j["model"].erase("merges");
  ExpectJsonError(j, StatusCode::kInvalidArgument, "no 'merges' list");
  j = ByteBpe();
  j["model"]["unk_token"] = "<nope>";
  ExpectJsonError(j, StatusCode::kInvalidArgument, "unk_token '<nope>' is not in the vocabulary");
  // A byte with no token and no unk_token is an error, not a silently dropped byte.
  j = ByteBpe();
  j["model"]["vocab"].erase(ByteChar(0xA9));
  j["model"]["vocab"]["zzz"] = 0xA9;  // keep the ids dense
  StatusOr<Tokenizer> tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_THAT(*tok->Encode("ab"), ElementsAre(258));
  StatusOr<std::vector<int32_t>> ids = tok->Encode("\xC3\xA9");  // é = C3 A9
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("byte 0xA9 has no token"));
}

TEST(BpeTokenizerTest, RegexTranslation) {
  // The Qwen / Llama 3 split pattern, as the JS reference rewrites it.
  const std::string qwen = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  EXPECT_EQ(*tokenizer_internal::OnigurumaToPcre2(qwen),
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
            " ?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+");
  EXPECT_EQ(*tokenizer_internal::OnigurumaToPcre2("a{,3}.\\u00e9{x"), "a{0,3}[^\\n]\\x{00e9}\\{x");
  EXPECT_EQ(*tokenizer_internal::OnigurumaToPcre2("(?i:[a-]x)"), "(?:[aA-][xX])");
  EXPECT_EQ(tokenizer_internal::OnigurumaToPcre2("(?i:[a-z])").status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tediserve::engine
