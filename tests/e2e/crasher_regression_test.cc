// Replays every saved bad input under tests/regression/crashers/KIND/NAME/ against the real
// `tediserve` binary (the inputs that once crashed or hung it, issue 17) and checks the
// ground rule for input from outside: a normal exit with code 1 or 2 (no signal, no hang:
// 5 s each), a message on stderr, and that message names the offending file or flag.
//
// Layout of a case (the same as the fuzz-crasher collection it came from): case.json holds
// "argv" with placeholders @BIN@ (the binary), @SRC@ (the source tree), @CASE@ (a scratch
// folder), @BASE@ (a folder of eval outputs generated once per run, see BaseDir); an argument
// given as {"hex": ...} is raw bytes. files/ holds inputs copied into @CASE@ ('__' in a name
// stands for '/'; a folder is copied as a folder). "model": true starts @CASE@/model as a
// copy of models/tiny-llada with those files replaced.
//
// One test per case (CrasherCases/Replay.<kind>_<name>), so a failure names its case; the
// list is read when ctest runs, so a new case folder needs no rebuild.
#include <algorithm>
#include <mutex>

#include "common/input.h"
#include "e2e/cli_runner.h"

namespace tediserve::e2e {
namespace {

using nlohmann::json;

const fs::path& CasesRoot() {
  static const fs::path root = fs::path(TEDI_SOURCE_DIR) / "tests" / "regression" / "crashers";
  return root;
}

constexpr std::chrono::seconds kCaseTimeout{5};

struct Case {
  std::string kind, name;
  fs::path dir;
};

// Shown by GoogleTest instead of the struct's bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.kind << "/" << c.name; }

std::vector<Case> ListCases() {
  std::vector<Case> cases;
  std::error_code ec;
  for (const auto& kind : fs::directory_iterator(CasesRoot(), ec)) {
    if (!kind.is_directory()) continue;
    for (const auto& c : fs::directory_iterator(kind.path(), ec)) {
      if (fs::exists(c.path() / "case.json")) {
        cases.push_back({kind.path().filename().string(), c.path().filename().string(), c.path()});
      }
    }
  }
  std::sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.dir < b.dir; });
  return cases;
}

// GoogleTest names: letters, digits and '_' only; kept unique by the sorted order and a
// counter suffix only if two cases sanitise to the same name.
std::string TestName(const Case& c) {
  std::string n = c.kind + "_" + c.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Outputs of one small eval run (eval.json, evalsteps.jsonl), for the cases whose argv
// names @BASE@: fit-denoiser reads what eval wrote. Made once per test process.
const fs::path& BaseDir() {
  static TempDir base("tedi_crasher_base");
  static std::once_flag once;
  std::call_once(once, [] {
    RunCli({"eval", "--model", RealModelDir().string(), "--thresholds", "0.9", "--cache", "on", "--limit", "6",
            "--json", base.File("eval.json"), "--step-log", base.File("evalsteps.jsonl")});
  });
  return base.path();
}

class CrasherCases : public ::testing::TestWithParam<Case> {};

TEST_P(CrasherCases, Replay) {
  const Case& c = GetParam();
  const json spec = json::parse(ReadFile((c.dir / "case.json").string()));
  TempDir scratch("tedi_crasher");
  ASSERT_FALSE(scratch.path().empty());
  const fs::path tmp = scratch.path();
  if (spec.value("model", false)) fs::copy(RealModelDir(), tmp / "model", fs::copy_options::recursive);

  // What the message may name to point at the culprit: the input files' names, the flags
  // (for the flag cases), the scratch folder (a folder given where a file is expected).
  std::vector<std::string> names;
  const fs::path files = c.dir / "files";
  if (fs::is_directory(files)) {
    for (const auto& f : fs::directory_iterator(files)) {
      const std::string rel = ReplaceAll(f.path().filename().string(), "__", "/");
      const fs::path dst = tmp / rel;
      fs::create_directories(dst.parent_path());
      if (f.is_directory()) {
        fs::copy(f.path(), dst, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
      } else if (!fs::is_directory(dst)) {
        fs::copy_file(f.path(), dst, fs::copy_options::overwrite_existing);
        fs::permissions(dst, fs::perms::owner_write, fs::perm_options::add);
      }
      names.push_back(dst.filename().string());
    }
  }
  const std::string base = spec.dump().find("@BASE@") != std::string::npos ? BaseDir().string() : "";
  std::vector<std::string> args;
  const json& argv = spec.at("argv");
  for (size_t i = 1; i < argv.size(); ++i) {  // argv[0] is @BIN@: RunCli adds the binary
    std::string a = argv[i].is_object() ? FromHex(argv[i].at("hex").get<std::string>()) : argv[i].get<std::string>();
    a = ReplaceAll(a, "@SRC@", TEDI_SOURCE_DIR);
    a = ReplaceAll(a, "@CASE@", tmp.string());
    a = ReplaceAll(a, "@BASE@", base);
    if (a.rfind("--", 0) == 0) names.push_back(a);  // a flag is an input too
    if (a == tmp.string()) names.push_back(a);
    if (a.rfind(tmp.string() + "/", 0) == 0) {  // a path into the case: its (printable) file name
      names.push_back(fs::path(a).filename().string());
      names.push_back(SanitizeUtf8(fs::path(a).filename().string()));
    }
    args.push_back(std::move(a));
  }
  const RunResult r = RunCli(args, kCaseTimeout, tmp.string());
  const std::string repro = "case " + c.kind + "/" + c.name + " (" + spec.value("repro", std::string()) + ")\n";
  ASSERT_TRUE(r.spawned) << repro << r.Describe();
  ASSERT_FALSE(r.timed_out) << "hung: " << repro << r.Describe();
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "crashed: " << repro << r.Describe();
  EXPECT_TRUE(r.code() == 1 || r.code() == 2) << "expected exit 1 or 2: " << repro << r.Describe();
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << repro << r.Describe();
  EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << "UBSan report: " << repro << r.Describe();
  EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << "sanitizer report: " << repro << r.Describe();
  EXPECT_FALSE(r.err.empty()) << "no message: " << repro << r.Describe();
  if (!names.empty()) {
    const bool named =
        std::any_of(names.begin(), names.end(), [&](const std::string& n) { return r.err.find(n) != std::string::npos; });
    EXPECT_TRUE(named) << "stderr names none of the inputs (" << testing::PrintToString(names) << "): " << repro
                       << r.Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Saved, CrasherCases, ::testing::ValuesIn(ListCases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return TestName(info.param); });

TEST(CrasherCasesList, CasesArePresent) {
  // Guards against a moved folder silently turning the suite into zero tests.
  EXPECT_GE(ListCases().size(), 40u) << CasesRoot();
}

}  // namespace
}  // namespace tediserve::e2e
