// A fixed team of threads that run one function together, one call per shard.
//
// A tensor-parallel instance of degree d owns d shards ("devices"; on CPU a device is a
// core). The caller's thread is shard 0, so a degree-1 pool has no threads and no
// synchronisation cost. Inside the function, Sync() is a barrier across all shards, used
// for the all-reduce after the attention and MLP blocks.
#pragma once

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <mutex>
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
  void Sync() {
    if (shards_ > 1) barrier_.arrive_and_wait();
  }

 private:
  void WorkerLoop(int shard);

  const int shards_;
  std::barrier<> barrier_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tediserve::engine
