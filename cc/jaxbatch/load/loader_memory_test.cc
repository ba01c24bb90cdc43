// A Loader whose one batch cannot fit is refused when it is made, naming the
// bytes (issue 38): with host_memory_limit, against the limit; without one,
// against the memory the machine has available. On main a Pack of
// row_length 2^31 - 1 went on to allocate its first batch and the process
// was killed for memory.
#include <gtest/gtest.h>

#include <string>

#include "jaxbatch/base/available_memory.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

LoaderOptions Packed(int64_t row_length, int64_t rows) {
  LoaderOptions o;
  o.schedule.planner = PackOptions{.row_length = row_length, .rows_per_batch = rows};
  o.num_threads = 1;
  return o;
}

TEST(LoaderMemoryTest, ABatchPastTheMachinesMemoryIsRefusedWhenMade) {
  if (!AvailableMemoryBytes()) GTEST_SKIP() << "this system does not say its available memory";
  const auto ds = testing::TokensDataset({3, 5, 2});
  // 2^10 rows of 2^31 - 1 int32 tokens, segment ids and positions: 24 TiB.
  const std::string message =
      ThrownMessage<InvalidArgumentError>([&] { Loader loader(ds, Packed(kMaxExtent, 1024)); });
  // Tokens, segment ids and positions (12 bytes a cell), lengths, starts
  // and example_index (16 bytes a segment).
  EXPECT_TRUE(Contains(message,
                       "Loader: one batch of Pack's largest shape (1024 rows x "
                       "2147483647, 4 segments) takes 26388279119872 bytes, more than"))
      << message;
  EXPECT_TRUE(Contains(message, "bytes this machine has available")) << message;
  // A limit says so against the limit instead, with the same bytes.
  LoaderOptions limited = Packed(kMaxExtent, 1024);
  limited.host_memory_limit = int64_t{1} << 30;
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { Loader loader(ds, limited); }),
                       "Loader: host_memory_limit 1073741824 bytes holds fewer than prefetch + "
                       "2 = 6 batches of up to 26388279119872 bytes"));
  // A batch that fits starts as before, and yields every example.
  Loader fits(ds, Packed(16, 2));
  EXPECT_EQ(testing::Drain(fits).size(), 1u);
}

}  // namespace
}  // namespace jaxbatch
