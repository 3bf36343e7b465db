#include "engine/shard_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tediserve::engine {
namespace {

TEST(ShardPoolTest, RunsEveryShardOnceAndWaits) {
  for (int n : {1, 2, 3, 4}) {
    ShardPool pool(n);
    EXPECT_EQ(pool.size(), n);
    for (int round = 0; round < 200; ++round) {
      std::vector<int> hits(n, 0);
      pool.Run([&](int s) { hits[s] += 1; });
      for (int s = 0; s < n; ++s) ASSERT_EQ(hits[s], 1) << "n " << n << " round " << round;
    }
  }
}

// Sync() is a real barrier: after it every shard sees what all shards wrote before it.
TEST(ShardPoolTest, SyncOrdersPhases) {
  const int n = 3;
  ShardPool pool(n);
  std::vector<int> phase1(n), sums(n);
  for (int round = 0; round < 300; ++round) {
    pool.Run([&](int s) {
      phase1[s] = round + s;
      pool.Sync();
      int sum = 0;
      for (int o = 0; o < n; ++o) sum += phase1[o];
      sums[s] = sum;
      pool.Sync();
    });
    for (int s = 0; s < n; ++s) ASSERT_EQ(sums[s], 3 * round + 3) << "round " << round;
  }
}

}  // namespace
}  // namespace tediserve::engine
