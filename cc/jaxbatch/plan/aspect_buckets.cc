#include "jaxbatch/plan/aspect_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/plan/balance.h"
#include "jaxbatch/plan/shape_batches.h"

namespace jaxbatch {
namespace {

constexpr const char* kName = "AspectBuckets";
using Wide = __int128;

void RequirePositive(int64_t value, const char* option) {
  if (value <= 0) {
    throw InvalidArgumentError(
        StrCat(kName, ": ", option, " must be a positive integer, found ", value));
  }
}

void RequirePositiveIfSet(const std::optional<int64_t>& value, const char* option) {
  if (value) RequirePositive(*value, option);
}

// ratio(a) < ratio(b), ratios W / H compared exactly.
bool Wider(const Resolution& b, const Resolution& a) {
  return Wide{a.width} * b.height < Wide{b.width} * a.height;
}

void ValidateRatios(const AspectBucketsOptions& o) {
  if (o.ratios.empty() == !o.max_shapes) {
    throw InvalidArgumentError(
        StrCat(kName,
               ": give ratios (the buckets' width:height ratios) or max_shapes (at most that many "
               "chosen from the data), ",
               o.ratios.empty() ? "found neither" : "not both"));
  }
  RequirePositiveIfSet(o.max_shapes, "max_shapes");
  if (o.ratios.size() % 2 != 0) {
    throw InvalidArgumentError(StrCat(kName, ": ratios must be (width, height) pairs, found ",
                                      o.ratios.size(), " numbers"));
  }
  for (size_t k = 0; k < o.ratios.size(); ++k) {
    if (o.ratios[k] <= 0 || o.ratios[k] > kMaxExtent) {
      throw InvalidArgumentError(StrCat(kName, ": ratio ", k / 2, " (", o.ratios[k - k % 2], ":",
                                        o.ratios[k - k % 2 + 1],
                                        ") must be two positive integers of at most ", kMaxExtent));
    }
  }
}

// Rows per batch of a bucket of `cells` = H x W: batch_size and/or
// token_budget // cells rounded down to rows_multiple.
int64_t BucketRows(const AspectBucketsOptions& o, int64_t cells) {
  int64_t rows = o.batch_size.value_or(std::numeric_limits<int64_t>::max());
  if (o.token_budget)
    rows = std::min(rows, *o.token_budget / cells / o.rows_multiple * o.rows_multiple);
  return rows;
}

// Each example's log aspect ratio, sorted, with prefix sums: what the
// choice's costs are read from.
struct LogRatios {
  std::vector<double> x;
  std::vector<double> prefix;  // prefix[i]: x[0] + ... + x[i - 1]

  // How many are <= v.
  size_t AtMost(double v) const { return std::upper_bound(x.begin(), x.end(), v) - x.begin(); }
  // Summed |x - at| over x[l, r), all on one side of `at`.
  double Cost(size_t l, size_t r, double at) const {
    return std::abs(prefix[r] - prefix[l] - static_cast<double>(r - l) * at);
  }
};

double LogRatio(int64_t height, int64_t width) {
  return std::log(static_cast<double>(width)) - std::log(static_cast<double>(height));
}

LogRatios SortedLogRatios(std::span<const int64_t> heights, std::span<const int64_t> widths,
                          std::span<const int64_t> ids) {
  LogRatios r;
  for (int64_t id : ids) {
    r.x.push_back(LogRatio(heights[static_cast<size_t>(id)], widths[static_cast<size_t>(id)]));
  }
  std::sort(r.x.begin(), r.x.end());
  r.prefix.assign(r.x.size() + 1, 0.0);
  for (size_t i = 0; i < r.x.size(); ++i) r.prefix[i + 1] = r.prefix[i] + r.x[i];
  return r;
}

// The exact choice: dp[j][b] is the least error of the examples with ratio
// <= L[b] when b is the (j + 1)-th bucket chosen and the widest so far
// (those between two chosen buckets go to the nearer); the answer adds the
// examples past the widest. Fewer buckets win ties.
std::vector<Resolution> ChooseFromData(const LogRatios& r, std::span<const Resolution> cands,
                                       int64_t max_shapes) {
  if (r.x.empty()) return {};
  // A bucket narrower (wider) than every example is beaten by the nearest
  // such one: only the resolutions from there to there take part.
  std::vector<double> all(cands.size());
  for (size_t c = 0; c < cands.size(); ++c) all[c] = LogRatio(cands[c].height, cands[c].width);
  size_t lo = std::upper_bound(all.begin(), all.end(), r.x.front()) - all.begin();
  size_t hi = std::lower_bound(all.begin(), all.end(), r.x.back()) - all.begin();
  lo = lo > 0 ? lo - 1 : 0;
  hi = std::min(hi + 1, cands.size());
  const std::vector<double> L(all.begin() + static_cast<std::ptrdiff_t>(lo),
                              all.begin() + static_cast<std::ptrdiff_t>(hi));
  const size_t c = L.size();
  const size_t n = r.x.size();
  const auto k = static_cast<size_t>(std::min<int64_t>(max_shapes, static_cast<int64_t>(c)));
  std::vector<size_t> below(c);  // examples with ratio <= L[b]
  for (size_t b = 0; b < c; ++b) below[b] = r.AtMost(L[b]);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> dp(k, std::vector<double>(c, inf));
  std::vector<std::vector<size_t>> from(k, std::vector<size_t>(c, 0));
  for (size_t b = 0; b < c; ++b) dp[0][b] = r.Cost(0, below[b], L[b]);
  for (size_t j = 1; j < k; ++j) {
    for (size_t b = j; b < c; ++b) {
      for (size_t a = j - 1; a < b; ++a) {
        if (dp[j - 1][a] == inf) continue;
        const size_t mid = std::clamp(r.AtMost((L[a] + L[b]) / 2), below[a], below[b]);
        const double cost =
            dp[j - 1][a] + r.Cost(below[a], mid, L[a]) + r.Cost(mid, below[b], L[b]);
        if (cost < dp[j][b]) {
          dp[j][b] = cost;
          from[j][b] = a;
        }
      }
    }
  }
  double best = inf;
  size_t best_j = 0, best_b = 0;
  for (size_t j = 0; j < k; ++j) {
    for (size_t b = 0; b < c; ++b) {
      const double cost = dp[j][b] + r.Cost(below[b], n, L[b]);
      if (cost < best) {
        best = cost;
        best_j = j;
        best_b = b;
      }
    }
  }
  std::vector<Resolution> chosen(best_j + 1);
  for (size_t j = best_j + 1, b = best_b; j-- > 0; b = from[j][b]) chosen[j] = cands[lo + b];
  return chosen;
}

// Throws unless every planned example has 0 < h, w <= kMaxExtent (an empty
// image has no ratio; past int32 the exact comparisons could wrap).
void CheckSizes(std::span<const int64_t> heights, std::span<const int64_t> widths,
                std::span<const int64_t> ids) {
  if (widths.size() != heights.size()) {
    throw InvalidArgumentError(
        StrCat(kName,
               ": plans images by height and width; pass [n, 2] sizes or a column with two "
               "variable axes, found ",
               heights.size(), " lengths and ", widths.size(), " widths"));
  }
  for (int64_t id : ids) {
    const int64_t h = heights[static_cast<size_t>(id)];
    const int64_t w = widths[static_cast<size_t>(id)];
    if (h <= 0 || w <= 0 || h > kMaxExtent || w > kMaxExtent) {
      throw InvalidArgumentError(StrCat(kName, ": example ", id, " is ", h, " x ", w,
                                        "; an aspect ratio needs a height and width from 1 to ",
                                        kMaxExtent));
    }
  }
}

}  // namespace

void ValidateAspectBuckets(const AspectBucketsOptions& o) {
  RequirePositive(o.area, "area");
  RequirePositive(o.multiple, "multiple");
  CheckExtent(o.area, kName, "area", "lengths");
  if (o.area / o.multiple / o.multiple == 0) {
    throw InvalidArgumentError(StrCat(kName, ": area=", o.area, " holds no ", o.multiple, " x ",
                                      o.multiple, " bucket (multiple=", o.multiple,
                                      "); raise area to at least ", o.multiple * o.multiple));
  }
  if (o.area / o.multiple / o.multiple > kMaxAspectWidths) {
    throw InvalidArgumentError(
        StrCat(kName, ": area=", o.area, " with multiple=", o.multiple, " makes ",
               o.area / o.multiple / o.multiple, " bucket widths, more than ", kMaxAspectWidths,
               "; raise multiple to at least ",
               static_cast<int64_t>(
                   std::ceil(std::sqrt(static_cast<double>(o.area) / kMaxAspectWidths)))));
  }
  ValidateRatios(o);
  RequirePositiveIfSet(o.batch_size, "batch_size");
  RequirePositiveIfSet(o.token_budget, "token_budget");
  if (!o.batch_size && !o.token_budget) {
    throw InvalidArgumentError(
        StrCat(kName, ": expected batch_size or token_budget, found neither"));
  }
  RequirePositive(o.rows_multiple, "rows_multiple");
  if (o.batch_size && *o.batch_size % o.rows_multiple != 0) {
    throw InvalidArgumentError(StrCat(kName, ": batch_size=", *o.batch_size,
                                      " is not a multiple of rows_multiple=", o.rows_multiple));
  }
  // Every bucket has at most `area` cells: a budget of a row of it (times
  // rows_multiple) gives every bucket a row.
  const std::optional<int64_t> needed = CheckedMul(o.area, o.rows_multiple);
  if (o.token_budget && (!needed || *o.token_budget < *needed)) {
    throw InvalidArgumentError(
        StrCat(kName, ": token_budget ", *o.token_budget, " is smaller than area=", o.area,
               o.rows_multiple > 1 ? StrCat(" x rows_multiple=", o.rows_multiple) : "",
               "; raise token_budget to at least ", needed ? StrCat(*needed) : "more than int64"));
  }
  if (o.batch_size && !CheckedMul(*o.batch_size, o.area)) {
    throw InvalidArgumentError(StrCat(kName, ": batch_size=", *o.batch_size, " with area=", o.area,
                                      " makes a batch of more than ", kMaxSize, " cells"));
  }
}

std::vector<Resolution> AspectResolutions(int64_t area, int64_t multiple) {
  std::vector<Resolution> all;
  for (int64_t w = multiple; w <= area / multiple; w += multiple) {
    const int64_t h = area / w / multiple * multiple;
    all.push_back({h, w});
    all.push_back({w, h});
  }
  // By ratio, the largest area first among equal ratios; then one a ratio.
  std::sort(all.begin(), all.end(), [](const Resolution& a, const Resolution& b) {
    if (Wider(b, a) || Wider(a, b)) return Wider(b, a);
    return a.height * a.width > b.height * b.width;
  });
  all.erase(std::unique(all.begin(), all.end(),
                        [](const Resolution& a, const Resolution& b) {
                          return !Wider(a, b) && !Wider(b, a);
                        }),
            all.end());
  return all;
}

int64_t NearestResolution(std::span<const Resolution> sorted, int64_t height, int64_t width) {
  const Resolution x{height, width};
  // The first at least as wide as x.
  const auto b = static_cast<size_t>(
      std::lower_bound(sorted.begin(), sorted.end(), x,
                       [](const Resolution& r, const Resolution& v) { return Wider(v, r); }) -
      sorted.begin());
  if (b == sorted.size()) return static_cast<int64_t>(b) - 1;
  if (b == 0 || !Wider(sorted[b], x)) return static_cast<int64_t>(b);
  // Between a and b, x is nearer b in log space iff (w/h)^2 > (Wa/Ha)(Wb/Hb).
  const Resolution& lo = sorted[b - 1];
  const Resolution& hi = sorted[b];
  const Wide left = Wide{width} * width * lo.height * hi.height;
  const Wide right = Wide{lo.width} * hi.width * height * height;
  return static_cast<int64_t>(left > right ? b : b - 1);
}

std::vector<Resolution> ChooseAspectBuckets(std::span<const int64_t> heights,
                                            std::span<const int64_t> widths,
                                            std::span<const int64_t> ids,
                                            const AspectBucketsOptions& o) {
  const std::vector<Resolution> cands = AspectResolutions(o.area, o.multiple);
  if (o.max_shapes)
    return ChooseFromData(SortedLogRatios(heights, widths, ids), cands, *o.max_shapes);
  std::vector<int64_t> picked;
  for (size_t k = 0; k + 1 < o.ratios.size(); k += 2) {
    picked.push_back(NearestResolution(cands, o.ratios[k + 1], o.ratios[k]));
  }
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  std::vector<Resolution> chosen;
  for (int64_t c : picked) chosen.push_back(cands[static_cast<size_t>(c)]);
  return chosen;
}

double AspectError(std::span<const int64_t> heights, std::span<const int64_t> widths,
                   std::span<const int64_t> ids, std::span<const Resolution> buckets) {
  double error = 0;
  for (int64_t id : ids) {
    const int64_t h = heights[static_cast<size_t>(id)];
    const int64_t w = widths[static_cast<size_t>(id)];
    const Resolution& r = buckets[static_cast<size_t>(NearestResolution(buckets, h, w))];
    error += std::abs(LogRatio(h, w) - LogRatio(r.height, r.width));
  }
  return error;
}

BatchPlan PlanAspectBuckets(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            std::span<const int64_t> ids, const AspectBucketsOptions& o) {
  ValidateAspectBuckets(o);
  CheckSizes(heights, widths, ids);
  const std::vector<Resolution> buckets = ChooseAspectBuckets(heights, widths, ids, o);
  std::vector<BatchShape> shapes;
  for (const Resolution& r : buckets) {
    shapes.push_back(
        {.rows = BucketRows(o, r.height * r.width), .length = r.height, .width = r.width});
  }
  std::vector<int64_t> target_h(heights.size(), 0), target_w(heights.size(), 0);
  std::vector<int64_t> bucket_of(ids.size());
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto id = static_cast<size_t>(ids[p]);
    bucket_of[p] = NearestResolution(buckets, heights[id], widths[id]);
    target_h[id] = buckets[static_cast<size_t>(bucket_of[p])].height;
    target_w[id] = buckets[static_cast<size_t>(bucket_of[p])].width;
  }
  if (o.remainder == Remainder::kPad && o.balance_batches && o.token_budget) {
    // A budget's rows, spread evenly over each bucket's batches (balance.h).
    std::vector<int64_t> counts(shapes.size(), 0);
    for (int64_t s : bucket_of) ++counts[static_cast<size_t>(s)];
    for (size_t s = 0; s < shapes.size(); ++s) {
      shapes[s].rows = BalancedRows(counts[s], shapes[s].rows, o.rows_multiple);
    }
  }
  PlanBuilder builder = PlanBuilder::Grid();
  AddShapeBatches(shapes, ids, bucket_of, o.remainder, o.rows_multiple, builder);
  // Stats count the resized examples: the data as it will be collated.
  BatchPlan plan =
      std::move(builder).FinishGrid(target_h, target_w, static_cast<int64_t>(ids.size()));
  plan.resize_to.resize(2 * heights.size());
  for (size_t i = 0; i < heights.size(); ++i) {
    plan.resize_to[2 * i] = target_h[i];
    plan.resize_to[2 * i + 1] = target_w[i];
  }
  return plan;
}

void CheckAspectExamplesFit(std::span<const int64_t> heights, std::span<const int64_t> widths,
                            const AspectBucketsOptions& o) {
  std::vector<int64_t> ids(heights.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  CheckSizes(heights, widths, ids);
  const std::vector<Resolution> buckets = ChooseAspectBuckets(heights, widths, ids, o);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Resolution& r =
        buckets[static_cast<size_t>(NearestResolution(buckets, heights[i], widths[i]))];
    if (r.height != heights[i] || r.width != widths[i]) {
      throw InvalidArgumentError(
          StrCat(kName, ": example ", i, " is ", heights[i], " x ", widths[i],
                 ", but its bucket is ", r.height, " x ", r.width,
                 "; jaxbatch never resizes: resize each example to its target (jb.plan(sizes, "
                 "planner).resize_to) and load the resized data"));
    }
  }
}

void CheckResizedTo(std::span<const int64_t> resize_to, int64_t example, int64_t height,
                    int64_t width, std::string_view column) {
  const auto i = static_cast<size_t>(example);
  if (2 * i + 1 >= resize_to.size()) {
    throw InvalidArgumentError(StrCat("collate: column '", column, "', example ", example,
                                      " has no resize target in the plan (", resize_to.size() / 2,
                                      " examples planned)"));
  }
  if (resize_to[2 * i] != height || resize_to[2 * i + 1] != width) {
    throw InvalidArgumentError(
        StrCat("collate: column '", column, "', example ", example, " is ", height, " x ", width,
               ", but the plan resizes it to ", resize_to[2 * i], " x ", resize_to[2 * i + 1],
               " (AspectBuckets; plan.resize_to[", example,
               "]); jaxbatch never resizes: resize each example to its target first"));
  }
}

}  // namespace jaxbatch
