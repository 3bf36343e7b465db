#include "common/input.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace tediserve {
namespace {

std::string WriteText(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir.path() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadFile, RefusesMissingDirectoryAndOversizedFiles) {
  TempDir dir;
  const auto missing = ReadFile((dir.path() / "nope").string(), "trace");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const auto folder = ReadFile(dir.path().string(), "calibration");
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.status().message().find("is a directory"), std::string::npos);
  EXPECT_NE(folder.status().message().find("calibration"), std::string::npos);
  const std::string path = WriteText(dir, "big.txt", std::string(100, 'x'));
  EXPECT_FALSE(ReadFile(path, "x", 99).ok());
  const auto read = ReadFile(path, "x", 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->size(), 100u);
}

TEST(ParseJson, BoundsNestingDepthAndReportsPosition) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto r = ParseJson(deep, "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested deeper than 64"), std::string::npos);
  // Brackets inside strings do not count.
  const std::string in_string = "{\"a\": \"" + std::string(1000, '[') + "\\\"\"}";
  EXPECT_TRUE(ParseJson(in_string, "x").ok());
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']'), "x").ok());
  EXPECT_FALSE(ParseJson(std::string(65, '[') + std::string(65, ']'), "x").ok());
  const auto bad = ParseJson("{\"a\": 1,}", "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("config.json: not valid JSON"), std::string::npos);
}

TEST(ForEachJsonLine, NumbersLinesAndStopsAtTheFirstError) {
  TempDir dir;
  const std::string path = WriteText(dir, "t.jsonl", "{\"a\":1}\n\n{\"a\":2}\nnot json\n");
  int seen = 0;
  const Status s = ForEachJsonLine(path, "trace", [&](int line, const nlohmann::json& j) {
    EXPECT_EQ(j["a"].get<int>(), line == 1 ? 1 : 2);
    ++seen;
    return Status::Ok();
  });
  EXPECT_EQ(seen, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.jsonl:4"), std::string::npos) << s.message();
  const Status from_fn = ForEachJsonLine(path, "trace", [](int, const nlohmann::json&) {
    return InvalidArgument("field x is bad");
  });
  EXPECT_NE(from_fn.message().find("t.jsonl:1: field x is bad"), std::string::npos)
      << from_fn.message();
}

TEST(Csv, HeaderRowsCommentsAndRaggedLines) {
  const auto t = ParseCsv("# a comment\na, b\n1,2\n\n3 ,4\n", "p.csv");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->Column("b"), 1);
  EXPECT_EQ(t->Column("c"), -1);
  EXPECT_FALSE(t->RequireColumn("c").ok());
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[1].cells[0], "3");
  EXPECT_EQ(t->rows[1].line, 5);
  EXPECT_EQ(CsvInt(*t, t->rows[1], 1).value(), 4);
  const auto ragged = ParseCsv("a,b\n1\n", "p.csv");
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.status().message().find("p.csv:2: expected 2 fields, got 1"), std::string::npos);
  EXPECT_FALSE(ParseCsv("\n\n", "p.csv").ok());
  EXPECT_FALSE(ParseCsv("a,a\n", "p.csv").ok());
  const auto quoted = ParseCsv("a,b\n\"x, \"\"y\"\"\",2\n", "p.csv");
  ASSERT_TRUE(quoted.ok()) << quoted.status().message();
  EXPECT_EQ(quoted->rows[0].cells[0], "x, \"y\"");
  EXPECT_FALSE(ParseCsv("a\n\"open\n", "p.csv").ok());
  EXPECT_FALSE(ParseCsv("a,,b\n", "p.csv").ok());
  const auto big = ParseCsv("a\n99999999999\nnan\n", "p.csv");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(CsvInt(*big, big->rows[0], 0).ok());
  EXPECT_TRUE(CsvDouble(*big, big->rows[0], 0).ok());
  EXPECT_FALSE(CsvDouble(*big, big->rows[1], 0).ok());
}

TEST(Cells, ParseWholeFiniteValuesOnly) {
  double d = 0;
  EXPECT_TRUE(ParseDouble("1.5e3", &d));
  EXPECT_EQ(d, 1500);
  EXPECT_FALSE(ParseDouble("1.5x", &d));
  EXPECT_FALSE(ParseDouble("nan", &d));
  EXPECT_FALSE(ParseDouble("1e999", &d));
  EXPECT_FALSE(ParseDouble("", &d));
  std::int64_t i = 0;
  EXPECT_TRUE(ParseInt64("-42", &i));
  EXPECT_EQ(i, -42);
  EXPECT_FALSE(ParseInt64("99999999999999999999", &i));
  EXPECT_FALSE(ParseInt64("4.0", &i));
}

TEST(JsonFields, TypedReadsNameTheFieldAndValue) {
  const auto j = nlohmann::json::parse(R"({"n": 7, "big": 1e300, "u": 18446744073709551615,
                                           "s": "7", "f": 0.5})");
  EXPECT_EQ(JsonInt(j["n"], "n", 0, 10).value(), 7);
  const auto big = JsonInt(j["big"], "n_layers", 1, 1024);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("n_layers: expected an integer in [1, 1024], got 1e+300"),
            std::string::npos)
      << big.status().message();
  EXPECT_FALSE(JsonInt(j["u"], "u", 0, 1000).ok());
  EXPECT_FALSE(JsonInt(j["s"], "s", 0, 10).ok());
  EXPECT_FALSE(JsonInt(j["f"], "f", 0, 10).ok());
  EXPECT_DOUBLE_EQ(JsonNumber(j["f"], "f", 0, 1).value(), 0.5);
  EXPECT_FALSE(JsonNumber(j["big"], "f", 0, 1).ok());
  EXPECT_FALSE(JsonNumber(j["s"], "f", 0, 1).ok());
}

TEST(Utf8, InvalidSequencesAreReplaced) {
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));
  EXPECT_FALSE(IsValidUtf8("a\xFF" "b"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));        // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));    // surrogate
  EXPECT_EQ(SanitizeUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  const nlohmann::json s = std::string("x\xFF");
  EXPECT_EQ(JsonSnippet(s), "\"x\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonSnippet(nlohmann::json::array({1, 2})), "an array of 2");
}

}  // namespace
}  // namespace tediserve
