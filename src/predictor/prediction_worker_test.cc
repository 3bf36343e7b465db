#include "predictor/prediction_worker.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

namespace tediserve::predictor {
namespace {

// Remaining = blocks left x (10 + 10 x index of the threshold); records the calling thread.
class FakeEstimator : public policy::StepEstimator {
 public:
  void Predict(const policy::RequestState& r, std::span<const double>, std::span<double> out) override {
    thread = std::this_thread::get_id();
    ++requests_seen;  // only the worker thread calls it
    for (size_t k = 0; k < out.size(); ++k) out[k] = (r.num_blocks - r.block) * (10.0 + 10.0 * k);
  }
  int refresh_tokens() const override { return 4; }
  const char* name() const override { return "fake"; }
  std::thread::id thread;
  int requests_seen = 0;
};

std::vector<policy::RequestState> States(int n, int block) {
  std::vector<policy::RequestState> v(n);
  for (int i = 0; i < n; ++i) {
    v[i].spec.id = 100 + i;
    v[i].num_blocks = 8;
    v[i].block = block;
  }
  return v;
}

TEST(PredictionWorkerTest, PredictsOffTheCallingThreadInOrder) {
  FakeEstimator est;
  PredictionWorker w(&est, {0.9, 0.5});
  const uint64_t a = w.Submit(States(3, 0));
  const uint64_t b = w.Submit(States(2, 6));
  EXPECT_EQ(b, a + 1);
  PredictionWorker::Result rb = w.Wait(b);
  PredictionWorker::Result ra = w.Wait(a);
  ASSERT_EQ(ra.ids.size(), 3u);
  EXPECT_EQ(ra.ids[2], 102);
  ASSERT_EQ(ra.predicted.size(), 6u);
  EXPECT_DOUBLE_EQ(ra.predicted[0], 80);
  EXPECT_DOUBLE_EQ(ra.predicted[1], 160);
  ASSERT_EQ(rb.predicted.size(), 4u);
  EXPECT_DOUBLE_EQ(rb.predicted[3], 40);
  EXPECT_NE(est.thread, std::this_thread::get_id());
  EXPECT_EQ(w.jobs_done(), 2);
  // Taken tickets and unknown ones give nothing, without blocking.
  EXPECT_TRUE(w.Wait(a).ids.empty());
  EXPECT_TRUE(w.Wait(999).ids.empty());
  PredictionWorker::Result none;
  EXPECT_FALSE(w.TryTake(a, &none));
}

TEST(PredictionWorkerTest, ManyJobsAndShutdownWithWorkQueued) {
  FakeEstimator est;
  std::vector<uint64_t> tickets;
  {
    PredictionWorker w(&est, {0.9, 0.8, 0.7});
    for (int i = 0; i < 200; ++i) tickets.push_back(w.Submit(States(5, i % 8)));
    const auto r = w.Wait(tickets[150]);
    ASSERT_EQ(r.predicted.size(), 15u);
    EXPECT_DOUBLE_EQ(r.predicted[0], (8 - 150 % 8) * 10.0);
    PredictionWorker::Result early;
    // Jobs run in order, so every job before 150 is done by now.
    EXPECT_TRUE(w.TryTake(tickets[10], &early));
    EXPECT_EQ(early.ids.size(), 5u);
  }  // the destructor finishes the rest and joins
  // Every queued job ran before the join: 200 jobs of 5 requests each.
  EXPECT_EQ(est.requests_seen, 200 * 5);
}

}  // namespace
}  // namespace tediserve::predictor

namespace tediserve::predictor {
namespace {

TEST(PredictionWorkerTest, OnDoneWakesALoopThatNeverBlocksInWait) {
  FakeEstimator est;
  PredictionWorker w(&est, {0.9, 0.8});
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> done;
  w.SetOnDone([&](uint64_t t) {
    std::lock_guard<std::mutex> l(mu);
    done.push_back(t);
    cv.notify_all();
  });
  const uint64_t a = w.Submit(States(3, 2));
  const uint64_t b = w.Submit(States(1, 0));
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return done.size() == 2; }));
  EXPECT_EQ(done, (std::vector<uint64_t>{a, b}));
  PredictionWorker::Result r;
  ASSERT_TRUE(w.TryTake(b, &r));  // ready, taken without waiting
  EXPECT_EQ(r.ids.size(), 1u);
  EXPECT_DOUBLE_EQ(r.predicted[1], 8 * 20.0);
}

}  // namespace
}  // namespace tediserve::predictor
