// Tests for plan/patch_pack: the plan against a naive reference that
// counts each image's patches by hand (pixel sides over the patch) and
// packs the counts with the naive best/first fit of a row scan, the
// policies (partial patches, too long, dropping) and their errors.
#include "jaxbatch/plan/patch_pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// Patches by hand: one per (patch row, patch column) whose top-left pixel
// lies in the image.
int64_t NaivePatches(int64_t h, int64_t w, int64_t ph, int64_t pw) {
  int64_t n = 0;
  for (int64_t y = 0; y < h; y += ph) {
    for (int64_t x = 0; x < w; x += pw) ++n;
  }
  return n;
}

// Naive best-fit decreasing over all images (no lookahead): longest first,
// each into the open row with the least room that fits it.
std::vector<std::vector<int64_t>> NaiveBestFit(const std::vector<int64_t>& counts, int64_t row,
                                               int64_t segments) {
  std::vector<int64_t> ids(counts.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) {
    return counts[static_cast<size_t>(a)] > counts[static_cast<size_t>(b)];
  });
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> room;
  for (int64_t id : ids) {
    const int64_t need = counts[static_cast<size_t>(id)];
    size_t best = rows.size();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (static_cast<int64_t>(rows[r].size()) < segments && room[r] >= need &&
          (best == rows.size() || room[r] < room[best])) {
        best = r;
      }
    }
    if (best == rows.size()) {
      rows.emplace_back();
      room.push_back(row);
    }
    rows[best].push_back(id);
    room[best] -= need;
  }
  return rows;
}

std::vector<std::vector<int64_t>> PlanRows(const BatchPlan& plan) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (int64_t r = 0; r < view.stored_rows(); ++r) {
      const auto ex = view.row_examples(r);
      rows.emplace_back(ex.begin(), ex.end());
    }
  }
  return rows;
}

TEST(PatchPackTest, DocExample) {
  const PatchPackOptions o{.patch = {16, 16}, .row_length = 256, .rows_per_batch = 8};
  const BatchPlan plan =
      PlanPatchPack(std::vector<int64_t>{224, 512}, std::vector<int64_t>{224, 96}, {}, o);
  ASSERT_EQ(plan.num_batches(), 1);
  EXPECT_TRUE(plan.packed);
  EXPECT_EQ(plan.shapes[0].rows, 8);
  EXPECT_EQ(plan.shapes[0].length, 256);
  EXPECT_EQ(PlanRows(plan), (std::vector<std::vector<int64_t>>{{0}, {1}}));
  EXPECT_EQ(plan.stats.real_elements, 196 + 192);
  EXPECT_EQ(plan.stats.padded_elements, 8 * 256);
}

TEST(PatchPackTest, MatchesNaiveBestFitOnRandomSizes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t ph = 1 + static_cast<int64_t>(rng() % 8),
                  pw = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t row = 8 + static_cast<int64_t>(rng() % 64);
    const bool pad = trial % 2 == 1;
    std::vector<int64_t> h, w;
    const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
    for (int64_t i = 0; i < n; ++i) {
      int64_t gh = 0, gw = 0;
      do {
        gh = static_cast<int64_t>(rng() % 9);
        gw = static_cast<int64_t>(rng() % 9);
      } while (gh * gw > row);
      // Exact multiples, or under "pad" a partial last patch row/column.
      h.push_back(pad && gh > 0 ? gh * ph - static_cast<int64_t>(rng() % ph) : gh * ph);
      w.push_back(pad && gw > 0 ? gw * pw - static_cast<int64_t>(rng() % pw) : gw * pw);
    }
    PatchPackOptions o{
        .patch = {ph, pw}, .row_length = row, .rows_per_batch = 3, .max_segments_per_row = 4};
    o.partial_patches = pad ? PartialPatches::kPad : PartialPatches::kError;
    const BatchPlan plan = PlanPatchPack(h, w, {}, o);
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      counts.push_back(NaivePatches(h[i], w[i], ph, pw));
      total += counts.back();
    }
    EXPECT_EQ(PlanRows(plan), NaiveBestFit(counts, row, 4)) << "trial " << trial;
    EXPECT_EQ(plan.stats.real_elements, total);
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      EXPECT_EQ(plan.batch(b).shape, (BatchShape{.rows = 3, .length = row, .segments = 4}));
    }
  }
}

TEST(PatchPackTest, PartialPatchesErrorNamesImageAndSize) {
  const PatchPackOptions o{.patch = {16, 16}, .row_length = 64, .rows_per_batch = 1};
  const std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { PlanPatchPack(std::vector<int64_t>{32, 33}, std::vector<int64_t>{32, 16}, {}, o); });
  EXPECT_TRUE(Contains(message, "image 1 is 33 x 16 pixels")) << message;
  EXPECT_TRUE(Contains(message, "partial_patches=\"pad\"")) << message;
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] {
                         CheckPatchesFit(std::vector<int64_t>{32, 33}, std::vector<int64_t>{32, 16},
                                         o);
                       }),
                       "image 1 is 33 x 16"));
}

TEST(PatchPackTest, TooLongErrorSkipAndSplit) {
  // Image 1: 5 x 3 patches = 15 > row_length 8.
  const std::vector<int64_t> h = {2, 5, 1}, w = {2, 3, 4};
  PatchPackOptions o{.patch = {1, 1}, .row_length = 8, .rows_per_batch = 2};
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { PlanPatchPack(h, w, {}, o); }),
                       "image 1 has 5 x 3 = 15 patches"));
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] { CheckPatchesFit(h, w, o); }),
                       "image 1 has 5 x 3 = 15 patches"));
  o.too_long = TooLong::kSkip;
  CheckPatchesFit(h, w, o);
  BatchPlan plan = PlanPatchPack(h, w, {}, o);
  EXPECT_EQ(plan.skipped_examples, (std::vector<int64_t>{1}));
  EXPECT_EQ(plan.stats.skipped, 1);
  EXPECT_EQ(plan.stats.real_elements, 4 + 4);
  // Split: runs of floor(8 / 3) = 2 patch rows: 6, 6 and 3 patches.
  o.too_long = TooLong::kSplit;
  plan = PlanPatchPack(h, w, {}, o);
  EXPECT_TRUE(plan.split);
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> spans;  // image -> (start, length)
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    for (size_t q = 0; q < view.all_examples().size(); ++q) {
      const size_t k = static_cast<size_t>(view.row_begin.front()) + q;
      spans[view.examples[k]].push_back({view.starts[k], view.piece_lengths[k]});
      EXPECT_EQ(view.piece(static_cast<int64_t>(k)), view.starts[k] / 6 * (view.examples[k] == 1));
    }
  }
  std::sort(spans[1].begin(), spans[1].end());
  EXPECT_EQ(spans[1], (std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {6, 6}, {12, 3}}));
  EXPECT_EQ(spans[0], (std::vector<std::pair<int64_t, int64_t>>{{0, 4}}));
  EXPECT_EQ(plan.stats.real_elements, 4 + 15 + 4);
  // One patch row wider than a row cannot be split into whole rows.
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([&] {
                         PlanPatchPack(std::vector<int64_t>{1}, std::vector<int64_t>{9}, {}, o);
                       }),
                       "one is wider"));
}

TEST(PatchPackTest, KeptPatchesAreDeterministicPerSeedEpochExample) {
  PatchPackOptions o{
      .patch = {1, 1}, .row_length = 64, .rows_per_batch = 1, .drop_percent = 50, .drop_seed = 3};
  EXPECT_EQ(KeptPatchCount(10, 50), 5);
  EXPECT_EQ(KeptPatchCount(7, 50), 4);  // floor(3.5) dropped
  EXPECT_EQ(KeptPatchCount(1, 99), 1);  // at least one
  EXPECT_EQ(KeptPatchCount(0, 50), 0);
  const std::vector<int64_t> a = KeptPatchIds(40, o, 2, 9);
  EXPECT_EQ(a.size(), 20u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), a.size());
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), 40);
  EXPECT_EQ(KeptPatchIds(40, o, 2, 9), a);   // the same inputs: the same patches
  EXPECT_NE(KeptPatchIds(40, o, 3, 9), a);   // another epoch
  EXPECT_NE(KeptPatchIds(40, o, 2, 10), a);  // another image
  o.drop_seed = 4;
  EXPECT_NE(KeptPatchIds(40, o, 2, 9), a);  // another seed
  // The plan packs the kept counts.
  o.drop_seed = 3;
  const BatchPlan plan =
      PlanPatchPack(std::vector<int64_t>{10, 6}, std::vector<int64_t>{10, 1}, {}, o);
  EXPECT_EQ(plan.stats.real_elements, 50 + 3);
}

TEST(PatchPackTest, TokenBudgetOrderAndRemainder) {
  PatchPackOptions o{.patch = {2, 2},
                     .row_length = 4,
                     .token_budget = 13,
                     .algorithm = PackAlgorithm::kFirstFit,
                     .rows_multiple = 1};
  EXPECT_EQ(PatchRowsPerBatch(o), 3);
  // 4 patches each: one image a row, in the given order, 3 rows a batch.
  const std::vector<int64_t> h(5, 4), w(5, 4);
  const std::vector<int64_t> order = {4, 2, 0, 1, 3};
  BatchPlan plan = PlanPatchPack(h, w, order, o);
  EXPECT_EQ(PlanRows(plan), (std::vector<std::vector<int64_t>>{{4}, {2}, {0}, {1}, {3}}));
  ASSERT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.batch(1).shape.rows, 3);  // padded remainder
  o.remainder = Remainder::kDrop;
  plan = PlanPatchPack(h, w, order, o);
  EXPECT_EQ(plan.num_batches(), 1);
  EXPECT_EQ(plan.dropped_examples, (std::vector<int64_t>{1, 3}));
}

TEST(PatchPackTest, ValidationNamesTheOption) {
  auto message = [](const PatchPackOptions& o) {
    return ThrownMessage<InvalidArgumentError>([&] { ValidatePatchPack(o); });
  };
  EXPECT_TRUE(Contains(message({.patch = {16}, .row_length = 4, .rows_per_batch = 1}),
                       "patch must be (height, width)"));
  EXPECT_TRUE(Contains(message({.patch = {16, 0}, .row_length = 4, .rows_per_batch = 1}),
                       "patch[1] must be a positive integer, found 0"));
  // A patch's pixels are counted in an int32 (<column>_pixels): on main a
  // 2^31 x 2^31 patch (2^62 pixels, within int64) was accepted.
  const int64_t side = int64_t{1} << 31;
  EXPECT_EQ(message({.patch = {side, side}, .row_length = 4, .rows_per_batch = 1}),
            "PatchPack: patch 2147483648 x 2147483648 has 4611686018427387904 pixels; at most "
            "2147483647 fit a patch, as the batch's int32 <column>_pixels counts them");
  EXPECT_TRUE(Contains(message({.patch = {46341, 46341}, .row_length = 4, .rows_per_batch = 1}),
                       "has 2147488281 pixels"));
  EXPECT_TRUE(
      Contains(message({.patch = {side * 4, side * 2}, .row_length = 4, .rows_per_batch = 1}),
               "has more than 9223372036854775807 pixels"));
  ValidatePatchPack({.patch = {46340, 46340}, .row_length = 4, .rows_per_batch = 1});
  EXPECT_TRUE(Contains(message({.row_length = 0, .rows_per_batch = 1}), "row_length"));
  EXPECT_TRUE(Contains(message({.row_length = 4}), "rows_per_batch"));
  EXPECT_TRUE(
      Contains(message({.row_length = 4, .rows_per_batch = 2, .token_budget = 8}), "not both"));
  EXPECT_TRUE(Contains(message({.row_length = 4, .token_budget = 3}), "holds no row"));
  EXPECT_TRUE(Contains(
      message({.row_length = 4, .rows_per_batch = 1, .too_long = TooLong::kTruncate}), "truncate"));
  EXPECT_TRUE(Contains(message({.row_length = 4, .rows_per_batch = 1, .drop_percent = 100}),
                       "drop_percent must be in [0, 100)"));
  EXPECT_TRUE(Contains(
      message(
          {.row_length = 4, .rows_per_batch = 1, .too_long = TooLong::kSplit, .drop_percent = 10}),
      "split"));
  EXPECT_TRUE(Contains(message({.row_length = 4, .rows_per_batch = 3, .rows_multiple = 2}),
                       "not a multiple of rows_multiple=2"));
}

}  // namespace
}  // namespace jaxbatch
