#include "engine/shard_pool.h"

namespace tediserve::engine {

ShardPool::ShardPool(int shards) : shards_(shards < 1 ? 1 : shards), barrier_(shards_) {
  for (int s = 1; s < shards_; ++s) threads_.emplace_back([this, s] { WorkerLoop(s); });
}

ShardPool::~ShardPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ShardPool::Run(const std::function<void(int)>& fn) {
  if (shards_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    running_ = shards_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return running_ == 0; });
  job_ = nullptr;
}

void ShardPool::WorkerLoop(int shard) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(shard);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace tediserve::engine
