#include "sim/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.h"

namespace tediserve::sim {
namespace {

using policy::RequestSpec;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

RequestSpec Make(double arrival, int prompt, int output, double slo = 0, int priority = 0) {
  RequestSpec r;
  r.arrival = arrival;
  r.prompt_len = prompt;
  r.output_len = output;
  r.slo = slo;
  r.priority = priority;
  return r;
}

// Awkward doubles: they only survive the round trip if every digit that matters is written.
std::vector<RequestSpec> Sample() {
  std::vector<RequestSpec> v = {Make(0, 12, 32), Make(0.1, 300, 256, 2.5, 1),
                                Make(1.0 / 3.0, 7, 64, 0.1 + 0.2),
                                Make(12345.678901234567, 4000, 96, 1e-9, 3),
                                Make(99999.99999999999, 1, 1, 12345678.125, -2)};
  for (size_t i = 0; i < v.size(); ++i) v[i].id = static_cast<int64_t>(i);
  return v;
}

void ExpectSame(const std::vector<RequestSpec>& a, const std::vector<RequestSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << i;
    EXPECT_EQ(a[i].arrival, b[i].arrival) << i;  // bit-exact, not approximately
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len) << i;
    EXPECT_EQ(a[i].output_len, b[i].output_len) << i;
    EXPECT_EQ(a[i].slo, b[i].slo) << i;
    EXPECT_EQ(a[i].priority, b[i].priority) << i;
  }
}

// The error of reading `text` as a trace named `name`.
std::string ReadError(const std::string& name, const std::string& text) {
  TempDir dir;
  const std::string path = dir.File(name);
  WriteFile(path, text);
  StatusOr<std::vector<RequestSpec>> r = ReadTrace(path);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(TraceTest, CsvRoundTripIsExact) {
  TempDir dir;
  const std::string path = dir.File("t.csv");
  ASSERT_TRUE(WriteTrace(path, Sample()).ok());
  StatusOr<std::vector<RequestSpec>> back = ReadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, Sample());
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, "arrival_s,prompt_len,output_len,slo_s,priority");
}

TEST(TraceTest, JsonlRoundTripIsExact) {
  TempDir dir;
  const std::string path = dir.File("t.jsonl");
  ASSERT_TRUE(WriteTrace(path, Sample()).ok());
  StatusOr<std::vector<RequestSpec>> back = ReadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, Sample());
}

TEST(TraceTest, SortsByArrivalStablyAndNumbersDensely) {
  TempDir dir;
  const std::string path = dir.File("t.csv");
  WriteFile(path,
            "arrival_s,prompt_len,output_len,slo_s,priority\n"
            "5,10,32,,\n"
            "1,20,32,0,1\n"
            "5,30,32,3.5,0\n"
            "0.5,40,32,,2\n");
  StatusOr<std::vector<RequestSpec>> r = ReadTrace(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  const int prompts[] = {40, 20, 10, 30};  // ties keep file order
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*r)[i].id, i);
    EXPECT_EQ((*r)[i].prompt_len, prompts[i]);
  }
  EXPECT_EQ((*r)[0].priority, 2);
  EXPECT_EQ((*r)[2].slo, 0);  // empty cell = the run's SLO
  EXPECT_EQ((*r)[3].slo, 3.5);
}

TEST(TraceTest, OptionalColumnsAndKeysDefaultToZero) {
  TempDir dir;
  WriteFile(dir.File("a.csv"), "prompt_len,arrival_s,output_len\n# a comment\n\n12,0.5,64\n");
  StatusOr<std::vector<RequestSpec>> csv = ReadTrace(dir.File("a.csv"));
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  ExpectSame(*csv, {Make(0.5, 12, 64)});

  WriteFile(dir.File("a.jsonl"),
            "{\"arrival_s\": 0.5, \"prompt_len\": 12, \"output_len\": 64}\n\n"
            "{\"arrival_s\": 1, \"prompt_len\": 3, \"output_len\": 32, \"slo_s\": null}\n");
  StatusOr<std::vector<RequestSpec>> jsonl = ReadTrace(dir.File("a.jsonl"));
  ASSERT_TRUE(jsonl.ok()) << jsonl.status().ToString();
  std::vector<RequestSpec> want = {Make(0.5, 12, 64), Make(1, 3, 32)};
  want[1].id = 1;
  ExpectSame(*jsonl, want);
}

TEST(TraceTest, CsvErrorsNameFileAndLine) {
  const std::string header = "arrival_s,prompt_len,output_len,slo_s,priority\n";
  const std::string ok_row = "0,10,32,,\n";
  struct Case {
    std::string body;  // rows after the header and one good row: the bad one is line 3
    std::string want;
  };
  const Case cases[] = {
      {"1,10\n", "t.csv:3: expected 5 fields, got 2"},
      {"1,abc,32,,\n", "t.csv:3: column prompt_len: not an integer: \"abc\""},
      {"1,10,32.5,,\n", "t.csv:3: column output_len: not an integer: \"32.5\""},
      {"x,10,32,,\n", "t.csv:3: column arrival_s: not a finite number: \"x\""},
      {"-1,10,32,,\n", "t.csv:3: arrival_s: must be finite and in [0, 31536000], got -1"},
      {"inf,10,32,,\n", "t.csv:3: column arrival_s: not a finite number"},
      {"nan,10,32,,\n", "t.csv:3: column arrival_s: not a finite number"},
      {"4e18,10,32,,\n", "t.csv:3: arrival_s: must be finite and in [0, 31536000], got 4e+18"},
      {"1,2000000,32,,\n", "t.csv:3: prompt_len: must be > 0 and <= 1048576"},
      {"1,0,32,,\n", "t.csv:3: prompt_len: must be > 0 and <= 1048576, got 0"},
      {"1,10,-32,,\n", "t.csv:3: output_len: must be > 0 and <= 1048576, got -32"},
      {"1,10,32,-2,\n", "t.csv:3: slo_s: must be finite and in [0, 31536000]"},
      {"1,10,32,,high\n", "t.csv:3: column priority: not an integer"},
      {"1,10,99999999999,,\n", "t.csv:3: column output_len: not an integer"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ReadError("t.csv", header + ok_row + c.body), HasSubstr(c.want)) << c.body;
  }
  EXPECT_THAT(ReadError("t.csv", "arrival_s,prompt_len\n1,2\n"),
              HasSubstr("t.csv: missing column \"output_len\""));
  EXPECT_THAT(ReadError("t.csv", "arrival_s,prompt_len,output_len,prio\n1,2,3,0\n"),
              HasSubstr("t.csv:1: unknown column \"prio\""));
  EXPECT_THAT(ReadError("t.csv", header), HasSubstr("t.csv: the trace has no requests"));
  EXPECT_THAT(ReadError("t.csv", ""), HasSubstr("t.csv: empty file"));
}

TEST(TraceTest, JsonlErrorsNameFileAndLine) {
  const std::string ok = "{\"arrival_s\": 0, \"prompt_len\": 10, \"output_len\": 32}\n";
  struct Case {
    std::string line;  // the bad one is line 3 (after a good line and a blank line)
    std::string want;
  };
  const Case cases[] = {
      {"{\"arrival_s\": 1, \"prompt_len\": 10}", "t.jsonl:3: missing key \"output_len\""},
      {"{\"arrival_s\": 1, \"prompt_len\": \"10\", \"output_len\": 32}",
       "t.jsonl:3: prompt_len: expected an integer in [-2147483648, 2147483647], got \"10\""},
      {"{\"arrival_s\": 1, \"prompt_len\": 10.5, \"output_len\": 32}",
       "t.jsonl:3: prompt_len: expected an integer"},
      {"{\"arrival_s\": \"soon\", \"prompt_len\": 10, \"output_len\": 32}",
       "t.jsonl:3: arrival_s: expected a number"},
      {"{\"arrival_s\": -0.5, \"prompt_len\": 10, \"output_len\": 32}",
       "t.jsonl:3: arrival_s: must be finite and in [0, 31536000]"},
      {"{\"arrival_s\": 1, \"prompt_len\": 10, \"output_len\": 0}",
       "t.jsonl:3: output_len: must be > 0"},
      {"{\"arrival_s\": 1, \"prompt_len\": 10, \"output_len\": 32, \"slo\": 2}",
       "t.jsonl:3: unknown key \"slo\""},
      {"{\"arrival_s\": 1, \"prompt_len\": 10, \"output_len\": 5000000000}",
       "t.jsonl:3: output_len: expected an integer in"},
      {"{\"arrival_s\": 1, ", "t.jsonl:3: not valid JSON"},
      {"[1, 10, 32]", "t.jsonl:3: expected a JSON object"},
      {"{\"arrival_s\": 9.2e18, \"prompt_len\": 10, \"output_len\": 32}",
       "t.jsonl:3: arrival_s: must be finite and in [0, 31536000]"},
      {std::string(1000, '[') + std::string(1000, ']'), "t.jsonl:3: JSON nested deeper than 64"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ReadError("t.jsonl", ok + "\n" + c.line + "\n"), HasSubstr(c.want)) << c.line;
  }
  EXPECT_THAT(ReadError("t.jsonl", "\n\n"), HasSubstr("t.jsonl: the trace has no requests"));
}

TEST(TraceTest, FormatComesFromTheExtension) {
  EXPECT_THAT(ReadError("t.txt", "arrival_s,prompt_len,output_len\n0,1,1\n"),
              HasSubstr("t.txt: unknown trace format (expected a .csv or .jsonl file)"));
  TempDir dir;
  const Status s = WriteTrace(dir.File("t.json"), Sample());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("unknown trace format"));
  StatusOr<std::vector<RequestSpec>> missing = ReadTrace(dir.File("none.csv"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("none.csv"));
}

TEST(TraceTest, WriteRefusesWhatReadWouldRefuse) {
  TempDir dir;
  std::vector<RequestSpec> bad = Sample();
  bad[2].output_len = 0;
  const Status s = WriteTrace(dir.File("t.csv"), bad);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("request 2: output_len: must be > 0"));
}

TEST(CsvTest, SkipsBlankAndCommentLinesButCountsThem) {
  TempDir dir;
  const std::string path = dir.File("x.csv");
  WriteFile(path, "# provenance\na, b\r\n\n1 ,2\r\n# more\n3,4\n");
  StatusOr<CsvTable> t = ReadCsv(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->columns, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0].line, 4);
  EXPECT_EQ(t->rows[0].cells, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(t->rows[1].line, 6);
  EXPECT_EQ(t->Column("b"), 1);
  EXPECT_EQ(t->Column("c"), -1);
  EXPECT_FALSE(t->RequireColumn("c").ok());

  WriteFile(path, "a,a\n1,2\n");
  StatusOr<CsvTable> dup = ReadCsv(path);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("x.csv:1: duplicate column \"a\""));
}

}  // namespace
}  // namespace tediserve::sim
