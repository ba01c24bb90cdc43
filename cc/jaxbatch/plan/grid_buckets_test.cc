// Tests for filling grid remainders (grid_buckets.h: FillGridRemainders,
// ChooseGridBuckets) against hand-worked cases and a slow reference plan.
#include "jaxbatch/plan/grid_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "jaxbatch/plan/buckets.h"

namespace jaxbatch {
namespace {

// Padded cells of a plan of `shape_of` (remainder="pad"): per shape,
// ceil(held / rows) batches of rows x the bounding box of its examples.
int64_t ReferenceCells(std::span<const int64_t> h, std::span<const int64_t> w,
                       std::span<const int64_t> shape_of, std::span<const int64_t> rows) {
  int64_t cells = 0;
  for (size_t s = 0; s < rows.size(); ++s) {
    int64_t held = 0, box_h = 0, box_w = 0;
    for (size_t p = 0; p < h.size(); ++p) {
      if (shape_of[p] != static_cast<int64_t>(s)) continue;
      ++held;
      box_h = std::max(box_h, h[p]);
      box_w = std::max(box_w, w[p]);
    }
    cells += (held + rows[s] - 1) / rows[s] * rows[s] * box_h * box_w;
  }
  return cells;
}

TEST(FillGridRemaindersTest, ASmallShapesLastBatchEmptiesIntoALargerOnesSpareRows) {
  // Shape 0 (small, 4 rows) holds 2 examples, shape 1 (large, 4 rows) 6:
  // its last batch has 2 spare rows, which take shape 0's 2 examples.
  const std::vector<int64_t> h = {1, 2, 5, 5, 4, 5, 3, 5}, w = {2, 1, 6, 5, 6, 6, 6, 4};
  std::vector<int64_t> shape_of = {0, 0, 1, 1, 1, 1, 1, 1}, counts(8, 1);
  const std::vector<int64_t> rows = {4, 4};
  std::vector<int64_t> held = {2, 6};
  const int64_t before = ReferenceCells(h, w, shape_of, rows);
  FillGridRemainders(h, w, counts, shape_of, rows, held);
  EXPECT_EQ(held, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(shape_of, (std::vector<int64_t>(8, 1)));
  EXPECT_EQ(before, 4 * 2 * 2 + 8 * 5 * 6);
  EXPECT_EQ(ReferenceCells(h, w, shape_of, rows), 8 * 5 * 6);
}

TEST(FillGridRemaindersTest, OnlyExamplesInsideTheReceiversBoxMove) {
  // Shape 1's box is 5 x 6: the 7 x 1 example of shape 0 (tall) stays, the
  // 1 x 2 moves; a full shape (held a multiple of rows) takes none.
  const std::vector<int64_t> h = {7, 1, 5, 5, 5}, w = {1, 2, 6, 6, 6};
  std::vector<int64_t> shape_of = {0, 0, 1, 1, 1}, counts(5, 1);
  std::vector<int64_t> held = {2, 3};
  FillGridRemainders(h, w, counts, shape_of, std::vector<int64_t>{4, 4}, held);
  EXPECT_EQ(shape_of, (std::vector<int64_t>{0, 1, 1, 1, 1}));
  EXPECT_EQ(held, (std::vector<int64_t>{1, 4}));
  std::vector<int64_t> full_of = {0, 1, 1, 1, 1}, full_held = {1, 4};
  FillGridRemainders(h, w, counts, full_of, std::vector<int64_t>{4, 4}, full_held);
  EXPECT_EQ(full_of, (std::vector<int64_t>{0, 1, 1, 1, 1}));
}

TEST(FillGridRemaindersTest, PartOfAHistogramCellMoves) {
  // Cells: 5 examples of 2 x 2 in shape 0, 3 of 4 x 4 in shape 1 (rows 8):
  // 5 spare rows take all 5 (the whole cell moves); with rows 6, 3 spare
  // rows take 3 of the 5 (the cell keeps 2).
  const std::vector<int64_t> h = {2, 4}, w = {2, 4};
  std::vector<int64_t> counts = {5, 3}, shape_of = {0, 1}, held = {5, 3};
  FillGridRemainders(h, w, counts, shape_of, std::vector<int64_t>{8, 8}, held);
  EXPECT_EQ(shape_of, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(held, (std::vector<int64_t>{0, 8}));
  counts = {5, 3}, shape_of = {0, 1}, held = {5, 3};
  FillGridRemainders(h, w, counts, shape_of, std::vector<int64_t>{8, 6}, held);
  EXPECT_EQ(shape_of, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(held, (std::vector<int64_t>{2, 6}));
}

// Random histograms: ChooseGridBuckets with fill plans every example in a
// box that holds it, at most max_shapes shapes, and never more padded cells
// than the plain choice's plan (the reference, unfilled).
TEST(ChooseGridBucketsTest, FilledNeverPadsMoreThanThePlainPlan) {
  std::mt19937_64 rng(7);
  int improved = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 120)(rng);
    const int64_t k = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    const int64_t budget = std::uniform_int_distribution<int64_t>(4, 12)(rng) * 16 * 16;
    std::vector<int64_t> h(static_cast<size_t>(n)), w(static_cast<size_t>(n));
    for (size_t p = 0; p < h.size(); ++p) {
      h[p] = std::uniform_int_distribution<int64_t>(1, 10)(rng);
      w[p] = std::uniform_int_distribution<int64_t>(1, 10)(rng);
    }
    const GridShapeRows rows = [&](int64_t a, int64_t b) {
      return std::max<int64_t>(1, budget / (a * b));
    };
    const GridCost cost = [&](int64_t a, int64_t b, int64_t count) {
      return BucketCost(a * b, count, rows(a, b), /*pad_remainder=*/true);
    };
    const GridBuckets plain = ChooseGridBuckets(h, w, k, cost, rows, /*fill=*/false);
    const GridBuckets filled = ChooseGridBuckets(h, w, k, cost, rows, /*fill=*/true);
    ASSERT_LE(filled.boxes.size(), static_cast<size_t>(k));
    for (size_t p = 0; p < h.size(); ++p) {
      const GridShape& box = filled.boxes[static_cast<size_t>(filled.shape_of[p])];
      ASSERT_LE(h[p], box.height) << "trial " << trial;
      ASSERT_LE(w[p], box.width) << "trial " << trial;
    }
    const int64_t before = ReferenceCells(h, w, plain.shape_of, plain.rows);
    const int64_t after = ReferenceCells(h, w, filled.shape_of, filled.rows);
    ASSERT_LE(after, before) << "trial " << trial;
    improved += after < before;
  }
  EXPECT_GT(improved, 5) << improved;  // the fill does something on random data
}

}  // namespace
}  // namespace jaxbatch
