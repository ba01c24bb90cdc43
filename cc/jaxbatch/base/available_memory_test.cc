#include "jaxbatch/base/available_memory.h"

#include <gtest/gtest.h>

#include <fstream>

namespace jaxbatch {
namespace {

TEST(AvailableMemory, ReadsMemAvailableInBytes) {
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal:       24000000 kB\n"
                                    "MemFree:         1000000 kB\n"
                                    "MemAvailable:   21563772 kB\n"),
            int64_t{21563772} * 1024);
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal: 5 kB\n"), std::nullopt);
  EXPECT_EQ(MemAvailableFromMeminfo("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(MemAvailableFromMeminfo("MemAvailable: 99999999999999999999 kB\n"), std::nullopt);
}

TEST(AvailableMemory, ACgroupsRoomIsItsLimitLessItsUsage) {
  EXPECT_EQ(CgroupRoom("1073741824\n", "73741824\n"), int64_t{1000000000});
  EXPECT_EQ(CgroupRoom("max\n", "5\n"), std::nullopt);  // no limit
  EXPECT_EQ(CgroupRoom("100\n", "150\n"), 0);           // over it already
  EXPECT_EQ(CgroupRoom("", "1"), std::nullopt);
}

TEST(AvailableMemory, ThisMachineHasSome) {
  if (!std::ifstream("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo";
  const std::optional<int64_t> bytes = AvailableMemoryBytes();
  ASSERT_TRUE(bytes);
  EXPECT_GT(*bytes, 0);
}

}  // namespace
}  // namespace jaxbatch
