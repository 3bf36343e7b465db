// A fixed team of threads that run one function together, one call per shard.
//
// A tensor-parallel instance of degree d owns d shards ("devices"; on CPU a device is a
// core). The caller's thread is shard 0, so a degree-1 pool has no threads and no
// synchronisation cost. Inside the function, Sync() is a barrier across all shards, used
// for the all-reduce after the attention and MLP blocks.
//
// Waiting spins briefly before sleeping: a step's barriers are microseconds apart when the
// cores are free, and a futex wake-up costs more than the work between two barriers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tediserve::engine {

class ShardPool {
 public:
  explicit ShardPool(int shards);
  ~ShardPool();
  ShardPool(const ShardPool&) = delete;
  ShardPool& operator=(const ShardPool&) = delete;

  int size() const { return shards_; }

  // Runs fn(shard) on every shard and returns when all are done. Not reentrant.
  void Run(const std::function<void(int)>& fn);

  // Barrier across the shards of the current Run().
  void Sync();

 private:
  void WorkerLoop(int shard);
  // Waits until `word` differs from `old`: spins, then sleeps on the atomic.
  static void WaitWhileEquals(const std::atomic<uint32_t>& word, uint32_t old);

  const int shards_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> start_gen_{0};   // bumped to start a Run
  std::atomic<int> running_{0};          // workers still inside the current Run
  std::atomic<uint32_t> done_gen_{0};    // bumped when the last worker finishes
  std::atomic<int> barrier_count_{0};
  std::atomic<uint32_t> barrier_gen_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace tediserve::engine
