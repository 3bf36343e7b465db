#include "engine/task_file.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"

namespace tediserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tokenizer Digits() {
  nlohmann::json vocab = {{"<|eos|>", 0}, {"<|mask|>", 1}};
  int id = 2;
  for (char c : std::string("0123456789+=")) vocab[std::string(1, c)] = id++;
  const nlohmann::json j = {
      {"added_tokens", {{{"id", 0}, {"content", "<|eos|>"}, {"special", true}},
                        {{"id", 1}, {"content", "<|mask|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", ""}}}, {"behavior", "Isolated"}}},
      {"model", {{"type", "WordLevel"}, {"vocab", vocab}}}};
  auto t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

class TaskFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    const std::string p = (dir_.path() / "tasks.jsonl").string();
    std::ofstream(p) << text;
    return p;
  }
  void ExpectError(const std::string& text, const std::string& what) {
    auto r = ReadTaskFile(Write(text), tok_);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(what));
  }
  TempDir dir_;
  Tokenizer tok_ = Digits();
};

TEST_F(TaskFileTest, ReadsProblemsSkipsBlankLinesAndDefaultsTheTask) {
  auto r = ReadTaskFile(Write("{\"prompt\": \"1+2=\", \"answer\": \"3\", \"task\": \"add\"}\n\n"
                              "{\"prompt\": \"9=\", \"answer\": \"9\"}\n"),
                        tok_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].task, "add");
  EXPECT_EQ((*r)[0].answer, "3");
  EXPECT_THAT((*r)[0].ids, ElementsAre(3, 12, 4, 13));
  EXPECT_EQ((*r)[1].task, "all");
}

TEST_F(TaskFileTest, ErrorsNameTheLine) {
  ExpectError("{\"prompt\": \"1=\", \"answer\": \"1\"}\nnot json\n", "tasks.jsonl:2: not valid JSON");
  ExpectError("{\"prompt\": \"1=\"}\n", "tasks.jsonl:1: missing string field \"answer\"");
  ExpectError("{\"prompt\": 5, \"answer\": \"1\"}\n", "missing string field \"prompt\"");
  ExpectError("{\"prompt\": \"\", \"answer\": \"1\"}\n", "tasks.jsonl:1: empty prompt");
  ExpectError("{\"prompt\": \"1x=\", \"answer\": \"1\"}\n", "tasks.jsonl:1");
  ExpectError("\n\n", "no problems");
  auto missing = ReadTaskFile((dir_.path() / "none.jsonl").string(), tok_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("task file"));
  EXPECT_THAT(missing.status().message(), HasSubstr("none.jsonl: no such file"));
  // A task that is not a string, a line that is an array, a deep line: errors, not crashes.
  ExpectError("{\"prompt\": \"1=\", \"answer\": \"1\", \"task\": 3}\n", "missing string field \"task\"");
  ExpectError("[1, 2]\n", "tasks.jsonl:1: not a JSON object");
  ExpectError(std::string(100000, '[') + "\n", "tasks.jsonl:1: JSON nested deeper than");
}

}  // namespace
}  // namespace tediserve::engine
