// Tests for AspectBuckets (aspect_buckets.h): the resolutions, the nearest
// bucket and the exact choice checked against brute force written out here.
#include "jaxbatch/plan/aspect_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

template <typename F>
void ExpectMessageHas(F&& f, const std::string& part) {
  testing::ExpectThrowsWith<InvalidArgumentError>(std::forward<F>(f), part);
}

double LogRatio(int64_t h, int64_t w) { return std::log(double(w)) - std::log(double(h)); }

std::vector<int64_t> AllIds(size_t n) {
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}

TEST(AspectResolutions, KohyaBucketsOfAnAreaAndStep) {
  // 256 x 256 pixels in steps of 64: for each width the tallest height.
  const std::vector<Resolution> r = AspectResolutions(256 * 256, 64);
  // Kohya's list (make_bucket_resolutions), one resolution a ratio, by W / H.
  const std::vector<Resolution> expected = {
      {1024, 64}, {960, 64},  {896, 64},  {832, 64},  {768, 64},  {704, 64},  {640, 64},
      {576, 64},  {512, 128}, {448, 128}, {384, 128}, {320, 192}, {256, 256}, {192, 320},
      {128, 384}, {128, 448}, {128, 512}, {64, 576},  {64, 640},  {64, 704},  {64, 768},
      {64, 832},  {64, 896},  {64, 960},  {64, 1024}};
  EXPECT_EQ(r, expected);
}

TEST(NearestResolution, MatchesBruteForceInLogSpace) {
  const std::vector<Resolution> r = AspectResolutions(96 * 96, 16);
  std::mt19937_64 rng(7);
  for (int t = 0; t < 2000; ++t) {
    const int64_t h = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t w = 1 + static_cast<int64_t>(rng() % 300);
    double best = std::numeric_limits<double>::infinity();
    double second = best;
    size_t arg = 0;
    for (size_t k = 0; k < r.size(); ++k) {
      const double d = std::abs(LogRatio(h, w) - LogRatio(r[k].height, r[k].width));
      if (d < best) {
        second = best;
        best = d;
        arg = k;
      } else if (d < second) {
        second = d;
      }
    }
    if (second - best < 1e-12) continue;  // a tie: checked exactly below
    EXPECT_EQ(NearestResolution(r, h, w), static_cast<int64_t>(arg)) << h << " x " << w;
  }
  // 1:1 lies exactly between 1:2 and 2:1: the taller wins the tie.
  const std::vector<Resolution> two = {{2, 1}, {1, 2}};
  EXPECT_EQ(NearestResolution(two, 5, 5), 0);
  EXPECT_EQ(NearestResolution(two, 5, 6), 1);
}

// The least summed error over every set of at most k resolutions.
double BruteForceError(const std::vector<int64_t>& h, const std::vector<int64_t>& w,
                       const std::vector<Resolution>& cands, int64_t k) {
  double best = std::numeric_limits<double>::infinity();
  const auto c = static_cast<uint32_t>(cands.size());
  for (uint32_t mask = 1; mask < (1u << c); ++mask) {
    if (std::popcount(mask) > k) continue;
    std::vector<Resolution> chosen;
    for (uint32_t j = 0; j < c; ++j) {
      if (mask >> j & 1u) chosen.push_back(cands[j]);
    }
    double error = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      double d = std::numeric_limits<double>::infinity();
      for (const Resolution& r : chosen) {
        d = std::min(d, std::abs(LogRatio(h[i], w[i]) - LogRatio(r.height, r.width)));
      }
      error += d;
    }
    best = std::min(best, error);
  }
  return best;
}

TEST(ChooseAspectBuckets, ExactAgainstEverySubset) {
  // 48 x 48 in steps of 16: 13 resolutions, every subset scored.
  const std::vector<Resolution> cands = AspectResolutions(48 * 48, 16);
  ASSERT_EQ(cands.size(), 13u);
  std::mt19937_64 rng(3);
  for (int t = 0; t < 40; ++t) {
    const size_t n = 1 + rng() % 12;
    std::vector<int64_t> h(n), w(n);
    for (size_t i = 0; i < n; ++i) {
      h[i] = 1 + static_cast<int64_t>(rng() % 400);
      w[i] = 1 + static_cast<int64_t>(rng() % 400);
    }
    for (int64_t k = 1; k <= 4; ++k) {
      const AspectBucketsOptions o{
          .area = 48 * 48, .multiple = 16, .max_shapes = k, .batch_size = 2};
      const std::vector<int64_t> ids = AllIds(n);
      const std::vector<Resolution> chosen = ChooseAspectBuckets(h, w, ids, o);
      EXPECT_LE(static_cast<int64_t>(chosen.size()), k);
      EXPECT_NEAR(AspectError(h, w, ids, chosen), BruteForceError(h, w, cands, k), 1e-9)
          << "trial " << t << ", max_shapes " << k;
    }
  }
}

TEST(ChooseAspectBuckets, GivenRatiosTakeTheirNearestResolutions) {
  const AspectBucketsOptions o{
      .area = 256 * 256, .multiple = 64, .ratios = {1, 1, 4, 1, 1, 4, 1, 1}, .batch_size = 2};
  const std::vector<Resolution> chosen = ChooseAspectBuckets({}, {}, {}, o);
  const std::vector<Resolution> expected = {{512, 128}, {256, 256}, {128, 512}};
  EXPECT_EQ(chosen, expected);
}

TEST(PlanAspectBuckets, BatchesAreOneBucketAtItsResolution) {
  const std::vector<int64_t> h = {480, 640, 300, 1000, 200, 512, 700, 333, 90};
  const std::vector<int64_t> w = {640, 480, 900, 250, 200, 512, 710, 1000, 400};
  const AspectBucketsOptions o{.area = 256 * 256,
                               .multiple = 32,
                               .max_shapes = 3,
                               .batch_size = 2,
                               .remainder = Remainder::kKeep};
  const BatchPlan plan = Plan(h, o, {}, {}, w);
  ASSERT_TRUE(plan.grid);
  ASSERT_EQ(plan.resize_to.size(), 2 * h.size());
  std::vector<int> seen(h.size(), 0);
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView v = plan.batch(b);
    for (int64_t e : v.all_examples()) {
      ++seen[static_cast<size_t>(e)];
      EXPECT_EQ(plan.resize_to[2 * static_cast<size_t>(e)], v.shape.length);
      EXPECT_EQ(plan.resize_to[2 * static_cast<size_t>(e) + 1], v.shape.width);
    }
    EXPECT_LE(v.shape.length * v.shape.width, 256 * 256);
    EXPECT_EQ(v.shape.length % 32, 0);
    EXPECT_EQ(v.shape.width % 32, 0);
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  std::set<std::pair<int64_t, int64_t>> resolutions;  // kept remainders add rows, not resolutions
  for (const BatchShape& shape : plan.shapes) resolutions.insert({shape.length, shape.width});
  EXPECT_LE(resolutions.size(), 3u);
  EXPECT_DOUBLE_EQ(plan.stats.efficiency, 1.0);  // kept remainders: no padding rows
  // Planned again after resizing as reported: the same targets, at the sizes.
  std::vector<int64_t> rh(h.size()), rw(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    rh[i] = plan.resize_to[2 * i];
    rw[i] = plan.resize_to[2 * i + 1];
  }
  EXPECT_EQ(Plan(rh, o, {}, {}, rw).resize_to, plan.resize_to);
  CheckExamplesFit(rh, o, {}, rw);
  ExpectMessageHas([&] { CheckExamplesFit(h, o, {}, w); }, "example 0 is 480 x 640");
  ExpectMessageHas([&] { CheckExamplesFit(h, o, {}, w); }, "never resizes");
}

TEST(PlanAspectBuckets, RowsFromTheBudgetAndRemainders) {
  const std::vector<int64_t> h = {100, 100, 100, 100, 100};
  const std::vector<int64_t> w = {100, 100, 100, 100, 100};
  AspectBucketsOptions o{
      .area = 64 * 64, .multiple = 16, .ratios = {1, 1}, .token_budget = 2 * 64 * 64};
  BatchPlan plan = Plan(h, o, {}, {}, w);
  ASSERT_EQ(plan.num_batches(), 3);  // rows 2, the last padded
  EXPECT_EQ(plan.shapes[0], (BatchShape{.rows = 2, .length = 64, .width = 64}));
  o.remainder = Remainder::kDrop;
  plan = Plan(h, o, {}, {}, w);
  EXPECT_EQ(plan.num_batches(), 2);
  EXPECT_EQ(plan.dropped_examples, std::vector<int64_t>{4});
}

TEST(PlanAspectBuckets, Errors) {
  const AspectBucketsOptions ok{.area = 64 * 64, .multiple = 16, .max_shapes = 2, .batch_size = 2};
  ExpectMessageHas([&] { Plan(std::vector<int64_t>{3, 4}, ok); }, "found 2 lengths and 0 widths");
  ExpectMessageHas([&] { Plan(std::vector<int64_t>{3}, ok, {}, {}, std::vector<int64_t>{0}); },
                   "example 0 is 3 x 0");
  AspectBucketsOptions o = ok;
  o.ratios = {1, 1};
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "not both");
  o.max_shapes.reset();
  o.ratios = {1, 1, 2};
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "(width, height) pairs");
  o = ok;
  o.area = 8 * 8;
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "raise area to at least 256");
  o = ok;
  o.multiple = 1;
  o.area = 1 << 20;
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "raise multiple to at least 16");
  o = ok;
  o.batch_size.reset();
  o.token_budget = 100;
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "raise token_budget to at least 4096");
  o = ok;
  o.rows_multiple = 4;
  ExpectMessageHas([&] { ValidatePlannerOptions(o); }, "not a multiple of rows_multiple=4");
  const std::vector<int64_t> targets = {64, 32, 32, 64};
  CheckResizedTo(targets, 1, 32, 64, "image");
  ExpectMessageHas([&] { CheckResizedTo(targets, 0, 60, 30, "image"); },
                   "column 'image', example 0 is 60 x 30, but the plan resizes it to 64 x 32");
}

}  // namespace
}  // namespace jaxbatch
