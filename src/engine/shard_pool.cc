#include "engine/shard_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tediserve::engine {
namespace {
inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
constexpr int kSpinIterations = 20000;  // about 50-100 us before sleeping
}  // namespace

ShardPool::ShardPool(int shards) : shards_(shards < 1 ? 1 : shards) {
  for (int s = 1; s < shards_; ++s) threads_.emplace_back([this, s] { WorkerLoop(s); });
}

ShardPool::~ShardPool() {
  stop_.store(true);
  start_gen_.fetch_add(1);
  start_gen_.notify_all();
  for (auto& t : threads_) t.join();
}

void ShardPool::WaitWhileEquals(const std::atomic<uint32_t>& word, uint32_t old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (word.load(std::memory_order_acquire) != old) return;
    CpuRelax();
  }
  while (word.load(std::memory_order_acquire) == old) word.wait(old, std::memory_order_acquire);
}

void ShardPool::Run(const std::function<void(int)>& fn) {
  if (shards_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  running_.store(shards_ - 1, std::memory_order_relaxed);
  const uint32_t done = done_gen_.load(std::memory_order_relaxed);
  start_gen_.fetch_add(1, std::memory_order_release);
  start_gen_.notify_all();
  fn(0);
  WaitWhileEquals(done_gen_, done);
  job_ = nullptr;
}

void ShardPool::Sync() {
  if (shards_ == 1) return;
  const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == shards_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_release);
    barrier_gen_.notify_all();
    return;
  }
  WaitWhileEquals(barrier_gen_, gen);
}

void ShardPool::WorkerLoop(int shard) {
  uint32_t seen = 0;
  for (;;) {
    WaitWhileEquals(start_gen_, seen);
    seen = start_gen_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(shard);
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      done_gen_.fetch_add(1, std::memory_order_release);
      done_gen_.notify_all();
    }
  }
}

}  // namespace tediserve::engine
