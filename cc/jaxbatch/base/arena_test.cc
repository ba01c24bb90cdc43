#include "jaxbatch/base/arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

TEST(BufferArenaTest, ReusesReleasedBuffersSoSteadyStateAllocatesNothing) {
  BufferArena arena;
  for (int round = 0; round < 100; ++round) {
    uint8_t* a;
    uint8_t* b;
    auto owner_a = arena.Acquire(1000, &a);
    auto owner_b = arena.Acquire(5000, &b);
    a[999] = 1;
    b[4999] = 2;
  }
  EXPECT_EQ(arena.allocations(), 2);
  EXPECT_EQ(arena.bytes_in_use(), 0);
  EXPECT_EQ(arena.bytes_pooled(), 6000);
}

TEST(BufferArenaTest, ReusesOnlyBuffersOfTheSameSize) {
  BufferArena arena;
  uint8_t* data;
  {
    auto big = arena.Acquire(10000, &data);
  }
  auto small = arena.Acquire(100, &data);
  EXPECT_EQ(arena.allocations(), 2);
}

TEST(BufferArenaTest, LimitBlocksUntilMemoryComesBack) {
  BufferArena arena(/*limit_bytes=*/1000);
  uint8_t* data;
  auto first = arena.Acquire(800, &data);
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    uint8_t* d;
    auto second = arena.Acquire(800, &d);
    acquired = true;
  });
  while (arena.waiting() == 0) std::this_thread::yield();  // The loader's deadlock check reads it.
  EXPECT_FALSE(acquired.load());
  EXPECT_EQ(arena.waiting(), 1);
  first.reset();
  waiter.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(arena.waiting(), 0);
  EXPECT_THROW(arena.Acquire(2000, &data), InvalidArgumentError);
}

TEST(BufferArenaTest, CloseWakesWaitersWithAnError) {
  BufferArena arena(/*limit_bytes=*/100);
  uint8_t* data;
  auto held = arena.Acquire(100, &data);
  std::atomic<bool> failed{false};
  std::thread waiter([&] {
    uint8_t* d;
    try {
      arena.Acquire(100, &d);
    } catch (const Error&) {
      failed = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  arena.Close();
  waiter.join();
  EXPECT_TRUE(failed.load());
}

TEST(BufferArenaTest, PoolCapEvictsTheLeastRecentlyReleased) {
  BufferArena arena(/*limit_bytes=*/0, /*max_pooled_bytes=*/250);
  uint8_t* data;
  {
    auto a = arena.Acquire(100, &data);
  }  // pooled: 100
  {
    auto b = arena.Acquire(120, &data);
  }  // pooled: 100, 120
  {
    auto c = arena.Acquire(90, &data);
  }  // 310 > 250: the 100 goes
  EXPECT_EQ(arena.bytes_pooled(), 210);
  EXPECT_EQ(arena.allocations(), 3);
  {
    auto again = arena.Acquire(120, &data);
  }  // reused, not allocated
  EXPECT_EQ(arena.allocations(), 3);
  {
    auto big = arena.Acquire(300, &data);
  }  // over the cap alone: freed, not pooled
  EXPECT_EQ(arena.bytes_pooled(), 210);
}

TEST(BufferArenaTest, BufferOutlivesTheArena) {
  std::shared_ptr<void> owner;
  uint8_t* data;
  {
    BufferArena arena;
    owner = arena.Acquire(64, &data);
  }
  data[63] = 7;  // Still valid: ASan would flag a use after free.
  EXPECT_EQ(data[63], 7);
}

}  // namespace
}  // namespace jaxbatch
