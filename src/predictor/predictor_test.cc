#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "predictor/forest.h"
#include "predictor/gbm.h"
#include "predictor/model_check.h"
#include "predictor/step_log.h"
#include "predictor/step_predictor.h"

namespace tediserve::predictor {
namespace {

using ::testing::HasSubstr;

// y = 2 x0 + x1 on a grid: trees fit it closely.
void Data(int cols, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0, 1);
  for (int i = 0; i < 2000; ++i) {
    for (int c = 0; c < cols; ++c) x->push_back(u(rng));
    y->push_back(2 * (*x)[x->size() - cols] + (*x)[x->size() - cols + 1]);
  }
}

TEST(GbmTest, TrainsSavesLoadsAndPredictsTheSame) {
  std::vector<float> x, y;
  Data(3, &x, &y);
  GbmParams p;
  p.rounds = 100;
  auto g = Gbm::Train(x, y, 3, p);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<float> q = {0.5f, 0.5f, 0.1f, 0.1f, 0.9f, 0.7f};
  std::vector<float> a(2), b(2);
  ASSERT_TRUE(g->Predict(q, a).ok());
  EXPECT_NEAR(a[0], 1.5, 0.1);
  EXPECT_NEAR(a[1], 1.1, 0.1);
  TempDir dir;
  const std::string path = (dir.path() / "m.json").string();
  ASSERT_TRUE(g->SetAttribute("k", "v").ok());
  ASSERT_TRUE(g->Save(path).ok());
  auto h = Gbm::Load(path);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->num_features(), 3);
  EXPECT_EQ(h->Attribute("k"), "v");
  EXPECT_EQ(h->Attribute("absent"), "");
  ASSERT_TRUE(h->Predict(q, b).ok());
  EXPECT_EQ(a, b);
  std::vector<float> wrong(5);
  EXPECT_FALSE(h->Predict(wrong, b).ok());
}

TEST(GbmTest, BadTrainingInput) {
  std::vector<float> x(10), y(3);
  EXPECT_FALSE(Gbm::Train(x, y, 3, {}).ok());
  GbmParams p;
  p.rounds = 0;
  std::vector<float> x2(9);
  EXPECT_FALSE(Gbm::Train(x2, y, 3, p).ok());
}

TEST(ForestTest, MatchesXgboostRowByRowAndAcrossVaryingThreshold) {
  const int cols = 6;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> x, y;
  for (int i = 0; i < 3000; ++i) {
    for (int c = 0; c < cols; ++c) x.push_back(u(rng));
    const float* r = &x[x.size() - cols];
    y.push_back(r[3] > 0.6f ? r[0] * 3 : r[1] - r[2] * r[3]);
  }
  GbmParams p;
  p.rounds = 40;
  p.max_depth = 5;
  auto g = Gbm::Train(x, y, cols, p);
  ASSERT_TRUE(g.ok());
  auto json = g->ToJson();
  ASSERT_TRUE(json.ok());
  auto f = Forest::FromXgboostJson(*json);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_trees(), 40);
  EXPECT_EQ(f->num_features(), cols);
  std::vector<float> want(1000);
  ASSERT_TRUE(g->Predict(std::span<const float>(x.data(), 1000 * cols), want).ok());
  const std::vector<float> values = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f};
  for (int i = 0; i < 1000; ++i) {
    std::span<const float> row(x.data() + i * cols, cols);
    EXPECT_NEAR(f->Predict(row), want[i], 1e-5) << i;
    std::vector<float> out(values.size());
    f->PredictVarying(row, 3, values, out);
    std::vector<float> copy(row.begin(), row.end());
    for (size_t k = 0; k < values.size(); ++k) {
      copy[3] = values[k];
      EXPECT_NEAR(out[k], f->Predict(copy), 1e-5) << i << " " << k;
    }
  }
  EXPECT_FALSE(Forest::FromXgboostJson("{}").ok());
  EXPECT_FALSE(Forest::FromXgboostJson("not json").ok());
}

class StepPredictorFiles : public ::testing::Test {
 protected:
  std::string Trained(int cols, policy::FeatureSet set, bool tag) {
    std::vector<float> x, y;
    Data(cols, &x, &y);
    GbmParams p;
    p.rounds = 5;
    auto g = Gbm::Train(x, y, cols, p);
    EXPECT_TRUE(g.ok());
    std::string name = "model_";
    name += std::to_string(n_++);
    name += ".json";
    const std::string path = (dir_.path() / name).string();
    if (tag) {
      if (cols == policy::NumFeatures(set)) {
        auto sp = StepPredictor::FromGbm(std::move(*g), set);
        EXPECT_TRUE(sp.ok());
        EXPECT_TRUE(sp->Save(path).ok());
        return path;
      }
      EXPECT_TRUE(g->SetAttribute(kAttrFeatureSet, policy::FeatureSetName(set)).ok());
    }
    EXPECT_TRUE(g->Save(path).ok());
    return path;
  }
  void ExpectLoadError(const std::string& path, const std::string& what) {
    auto p = StepPredictor::Load(path);
    ASSERT_FALSE(p.ok());
    EXPECT_THAT(p.status().message(), HasSubstr(what));
  }
  TempDir dir_;
  int n_ = 0;
};

TEST_F(StepPredictorFiles, LoadsWhatItSavedAndPredictsAtLeastTheBlocksLeft) {
  auto p = StepPredictor::Load(Trained(policy::NumFeatures(policy::FeatureSet::kFull), policy::FeatureSet::kFull, true));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->feature_set(), policy::FeatureSet::kFull);
  policy::RequestState r;
  r.spec.output_len = 256;
  r.spec.prompt_len = 100;
  r.block_size = 32;
  r.num_blocks = 8;
  const policy::RequestState* rs[] = {&r, &r};
  const double th[] = {0.9, 0.5};
  std::vector<double> out(4);
  ASSERT_TRUE(p->Predict(rs, th, out).ok());
  for (double v : out) EXPECT_GE(v, 8);
  std::vector<double> small(3);
  EXPECT_FALSE(p->Predict(rs, th, small).ok());
}

TEST_F(StepPredictorFiles, MissingCorruptUntaggedOrMismatchedFilesAreErrors) {
  ExpectLoadError((dir_.path() / "none.json").string(), "no such file");
  const std::string junk = (dir_.path() / "junk.json").string();
  std::ofstream(junk) << "{\"learner\": 12";
  ExpectLoadError(junk, "not valid JSON");
  ExpectLoadError(dir_.path().string(), "is a directory");
  ExpectLoadError(Trained(9, policy::FeatureSet::kFull, false), "no TeDiServe feature set");
  // Tagged "full" but trained on 9 columns: the wrong feature count is named.
  ExpectLoadError(Trained(9, policy::FeatureSet::kFull, true), "has 9 features");
}

// The bundled model passes the structural check; each kind of mutation that crashed or hung
// libxgboost is refused with the field named.
TEST(ModelCheckTest, RefusesMalformedTreesBeforeXgboostSeesThem) {
  std::ifstream in(std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada/step_predictor.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json good = nlohmann::json::parse(ss.str());
  ASSERT_TRUE(CheckXgboostModel(good).ok()) << CheckXgboostModel(good).message();
  auto model = [](nlohmann::json& j) -> nlohmann::json& { return j["learner"]["gradient_booster"]["model"]; };
  struct Case {
    std::function<void(nlohmann::json&)> mutate;
    std::string want;
  };
  const Case cases[] = {
      {[&](nlohmann::json& j) { model(j)["gbtree_model_param"]["num_trees"] = "1000000"; }, "num_trees"},
      {[&](nlohmann::json& j) { model(j)["gbtree_model_param"]["num_trees"] = "41"; }, "expected 41 trees"},
      {[&](nlohmann::json& j) { model(j)["tree_info"] = nlohmann::json::array(); }, "tree_info"},
      {[&](nlohmann::json& j) { model(j)["trees"][3]["id"] = 0; }, "trees[3].id"},
      {[&](nlohmann::json& j) { model(j)["trees"][2]["parents"][1] = 2147483647; }, "trees[2].parents[1]"},
      {[&](nlohmann::json& j) { model(j)["trees"][2]["parents"][1] = -5; }, "trees[2].parents[1]"},
      {[&](nlohmann::json& j) { model(j)["trees"][1]["left_children"][0] = 0; }, "is not after it"},
      {[&](nlohmann::json& j) { model(j)["trees"][1]["split_indices"][0] = 26; }, "split_indices[0]"},
      {[&](nlohmann::json& j) { model(j)["trees"][1]["loss_changes"].erase(0); }, "loss_changes"},
      {[&](nlohmann::json& j) { model(j)["trees"][1]["split_conditions"][0] = "x"; }, "split_conditions[0]"},
      {[&](nlohmann::json& j) { model(j)["trees"][1]["categories_nodes"].push_back(0); }, "categorical"},
      {[&](nlohmann::json& j) { j["learner"]["objective"]["name"] = "binary:logistic"; }, "objective"},
      {[&](nlohmann::json& j) { j["learner"]["learner_model_param"]["num_feature"] = "-1"; }, "num_feature"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.mutate(j);
    const Status s = CheckXgboostModel(j);
    ASSERT_FALSE(s.ok()) << c.want;
    EXPECT_THAT(s.message(), HasSubstr(c.want));
  }
}

TEST(StepLogTest, RoundTripAndLineErrors) {
  TempDir dir;
  StepLogRow row;
  row.state.spec = {7, 0, 12, 64};
  row.state.block_size = 32;
  row.state.num_blocks = 2;
  row.state.steps = 3;
  row.state.block = 1;
  row.state.unmasked = 40;
  row.state.unmasked_in_block = 8;
  row.state.steps_in_block = 1;
  row.state.features.block = {24, 0.1f, 0.2f, 0.3f, 0.4f, 0.25f};
  row.state.features.block_above = {1, 2, 3, 4, 5};
  row.threshold = 0.7;
  row.remaining = 4;
  row.problem = 3;
  const std::string path = (dir.path() / "log.jsonl").string();
  ASSERT_TRUE(WriteStepLog(path, {row, row}).ok());
  auto back = ReadStepLog(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  const StepLogRow& b = (*back)[1];
  EXPECT_EQ(b.state.spec.id, 7);
  EXPECT_EQ(b.problem, 3);
  EXPECT_EQ(b.state.num_blocks, 2);
  EXPECT_EQ(b.state.unmasked_in_block, 8);
  EXPECT_FLOAT_EQ(b.state.features.block.q3, 0.4f);
  EXPECT_EQ(b.state.features.block_above[4], 5);
  EXPECT_DOUBLE_EQ(b.threshold, 0.7);
  EXPECT_EQ(b.remaining, 4);

  auto bad = [&](const std::string& text, const std::string& what) {
    const std::string p = (dir.path() / "bad.jsonl").string();
    std::ofstream(p) << StepLogRowJson(row) << "\n" << text << "\n";
    auto r = ReadStepLog(p);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(r.status().message(), HasSubstr(what));
  };
  bad("[1, 2]", "bad.jsonl:2: not a JSON object");
  std::string s = StepLogRowJson(row);
  bad(s.substr(0, s.size() - 1) + ",\"remaining\":0}", "");  // duplicate key: last wins -> out of range
  StepLogRow past = row;
  past.state.block = 2;
  bad(StepLogRowJson(past), "past the request's length");
  StepLogRow th = row;
  th.threshold = 1.5;
  bad(StepLogRowJson(th), "threshold");
  bad("{\"request\": 1}", "missing integer field");
  EXPECT_FALSE(ReadStepLog((dir.path() / "none.jsonl").string()).ok());
}

}  // namespace
}  // namespace tediserve::predictor
