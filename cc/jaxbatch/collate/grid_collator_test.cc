// Tests for grid collation: every batch against a naive reference that
// walks each row's example cell by cell (row-major [h, w] from its first
// cell) and writes the pad value everywhere else.
#include "jaxbatch/collate/grid_collator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

const Array& Find(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array '" << name << "'";
  static const Array kNone;
  return kNone;
}

template <typename T>
std::vector<T> Values(const Array& array) {
  std::vector<T> out(static_cast<size_t>(array.num_bytes()) / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), array.data, out.size() * sizeof(T));
  return out;
}

// A grid column of int16 cells of `inner` elements, example i filled with
// 1000 * i + its element index, so every value says where it came from.
struct Grid {
  std::string name;
  int64_t inner;
  std::vector<int64_t> shapes;  // h, w per example
  std::vector<int16_t> values;
  std::vector<int64_t> offsets{0};
  Grid(std::string name, int64_t inner, std::vector<int64_t> shapes)
      : name(std::move(name)), inner(inner), shapes(std::move(shapes)) {
    for (size_t i = 0; i < this->shapes.size() / 2; ++i) {
      const int64_t cells = this->shapes[2 * i] * this->shapes[2 * i + 1];
      for (int64_t k = 0; k < cells * inner; ++k) {
        values.push_back(static_cast<int16_t>(1000 * i + k));
      }
      offsets.push_back(offsets.back() + cells);
    }
  }
  RaggedColumn Column(std::vector<std::string> axes = {}) const {
    std::vector<int64_t> inner_shape;
    if (inner != 1) inner_shape = {inner};
    RaggedColumn cells =
        RaggedColumn::Ragged(name, DType::kInt16, inner_shape, values.data(), offsets.back(),
                             offsets.data(), static_cast<int64_t>(offsets.size()) - 1, nullptr);
    return RaggedColumn::WithAxes(RaggedColumn::Grid(std::move(cells), shapes), std::move(axes));
  }
};

// A batch view over `rows` (example ids, -1 for an empty stored row) of
// shape rows_total x H x W (W = 0: a 1-D batch of length H).
struct View {
  std::vector<int64_t> row_begin{0};
  std::vector<int64_t> examples;
  BatchView view;
  View(const std::vector<int64_t>& rows, BatchShape shape) {
    for (int64_t e : rows) {
      if (e >= 0) examples.push_back(e);
      row_begin.push_back(static_cast<int64_t>(examples.size()));
    }
    view.shape = shape;
    view.row_begin = row_begin;
    view.examples = examples;
  }
};

// The reference: [rows, H, W, inner] values, mask and (h, w).
struct Expected {
  std::vector<int16_t> values;
  std::vector<uint8_t> mask;
  std::vector<int32_t> lengths;
};
Expected Reference(const Grid& g, const std::vector<int64_t>& rows, int64_t total_rows, int64_t H,
                   int64_t W, int16_t pad) {
  Expected out{std::vector<int16_t>(static_cast<size_t>(total_rows * H * W * g.inner), pad),
               std::vector<uint8_t>(static_cast<size_t>(total_rows * H * W), 0),
               std::vector<int32_t>(static_cast<size_t>(total_rows * 2), 0)};
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t e = rows[r];
    if (e < 0) continue;
    const int64_t h = g.shapes[2 * e], w = g.shapes[2 * e + 1];
    out.lengths[2 * r] = static_cast<int32_t>(h);
    out.lengths[2 * r + 1] = static_cast<int32_t>(w);
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const auto cell = static_cast<size_t>((static_cast<int64_t>(r) * H + y) * W + x);
        out.mask[cell] = 1;
        for (int64_t k = 0; k < g.inner; ++k) {
          out.values[cell * g.inner + k] = g.values[(g.offsets[e] + y * w + x) * g.inner + k];
        }
      }
    }
  }
  return out;
}

void ExpectMatches(const std::vector<Array>& arrays, const std::string& name, const Expected& want,
                   std::vector<int64_t> shape) {
  const Array& values = Find(arrays, name);
  EXPECT_EQ(values.shape, shape);
  EXPECT_EQ(Values<int16_t>(values), want.values);
  EXPECT_EQ(Values<uint8_t>(Find(arrays, name + "_mask")), want.mask);
  EXPECT_EQ(Values<int32_t>(Find(arrays, name + "_lengths")), want.lengths);
}

TEST(GridCollatorTest, RandomGridBatchesMatchTheReferenceInOneOrManyThreads) {
  std::mt19937_64 rng(30);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 7);
    const int64_t inner = 1 + static_cast<int64_t>(rng() % 3);
    std::vector<int64_t> shapes;
    int64_t H = 0, W = 0;
    for (int64_t i = 0; i < n; ++i) {
      shapes.push_back(static_cast<int64_t>(rng() % 6));
      shapes.push_back(static_cast<int64_t>(rng() % 6));
    }
    for (int64_t i = 0; i < n; ++i) {
      H = std::max(H, shapes[2 * i]);
      W = std::max(W, shapes[2 * i + 1]);
    }
    H += static_cast<int64_t>(rng() % 3);
    W += static_cast<int64_t>(rng() % 3);
    const Grid g("image", inner, shapes);
    const Dataset ds({g.Column()});
    std::vector<int64_t> rows;
    for (int64_t i = n - 1; i >= 0; --i) rows.push_back(i);  // reversed, every example
    const int64_t total = n + static_cast<int64_t>(rng() % 3);
    const View v(rows, {.rows = total, .length = H, .width = W});
    const auto pad = static_cast<int16_t>(trial % 2 == 0 ? 0 : -7);
    const Expected want = Reference(g, rows, total, H, W, pad);
    for (int64_t threads : {1, 4}) {
      CollateOptions options;
      options.default_pad_value = static_cast<double>(pad);
      options.num_threads = threads;
      options.min_bytes_per_thread = 1;
      const std::vector<Array> arrays =
          CollateView(ds, v.view, BatchLayout{.length_column = "image"}, options);
      ExpectMatches(arrays, "image", want,
                    inner == 1 ? std::vector<int64_t>{total, H, W}
                               : std::vector<int64_t>{total, H, W, inner});
      std::vector<int64_t> index(static_cast<size_t>(total), -1);
      for (size_t r = 0; r < rows.size(); ++r) index[r] = rows[r];
      EXPECT_EQ(Values<int64_t>(Find(arrays, "example_index")), index);
      int64_t bytes = 0;
      for (const Array& a : arrays) bytes += a.num_bytes();
      EXPECT_EQ(CollatedBytes(ds, v.view.shape, BatchLayout{.length_column = "image"}), bytes);
    }
  }
}

TEST(GridCollatorTest, TiedSquareColumnIsLByLInAOneDBatch) {
  // tokens of lengths 2, 3, 1 and their pair features 2x2, 3x3, 1x1.
  const Grid tokens("tokens", 1, {2, 1, 3, 1, 1, 1});  // as a grid only for its values
  std::vector<int64_t> token_offsets = {0, 2, 5, 6};
  const RaggedColumn token_column =
      RaggedColumn::WithAxes(RaggedColumn::Ragged("tokens", DType::kInt16, {}, tokens.values.data(),
                                                  6, token_offsets.data(), 3, nullptr),
                             {"L"});
  const Grid pair("pair", 1, {2, 2, 3, 3, 1, 1});
  const Dataset ds({token_column, pair.Column({"L", "L"})});
  const std::vector<int64_t> rows = {2, 0};
  const View v(rows, {.rows = 3, .length = 4});
  CollateOptions options;
  const std::vector<Array> arrays = CollateView(ds, v.view, BatchLayout{}, options);
  ExpectMatches(arrays, "pair", Reference(pair, rows, 3, 4, 4, 0), {3, 4, 4});
  EXPECT_EQ(Find(arrays, "tokens").shape, (std::vector<int64_t>{3, 4}));
  // Untied (axes h, w): the column pads to its largest example in the data.
  const Dataset untied({token_column, pair.Column({"h", "w"})});
  const std::vector<Array> loose = CollateView(untied, v.view, BatchLayout{}, options);
  ExpectMatches(loose, "pair", Reference(pair, rows, 3, 3, 3, 0), {3, 3, 3});
}

TEST(GridCollatorTest, OneDColumnTiedToAGridAxisTakesItsExtent) {
  const Grid pair("pair", 1, {2, 2, 3, 3});
  std::vector<int16_t> values = {1, 2, 3, 4, 5};
  std::vector<int64_t> offsets = {0, 2, 5};
  const RaggedColumn tokens =
      RaggedColumn::WithAxes(RaggedColumn::Ragged("tokens", DType::kInt16, {}, values.data(), 5,
                                                  offsets.data(), 2, nullptr),
                             {"L"});
  const Dataset ds({pair.Column({"L", "L"}), tokens});
  const View v({1, 0}, {.rows = 2, .length = 5, .width = 5});
  const std::vector<Array> arrays =
      CollateView(ds, v.view, BatchLayout{.length_column = "pair"}, CollateOptions{});
  EXPECT_EQ(Find(arrays, "pair").shape, (std::vector<int64_t>{2, 5, 5}));
  EXPECT_EQ(Find(arrays, "tokens").shape, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(Values<int32_t>(Find(arrays, "tokens_lengths")), (std::vector<int32_t>{3, 2}));
}

TEST(GridCollatorTest, TooBigExampleNamesColumnExampleAndSizesOrIsTruncated) {
  const Grid g("image", 1, {2, 3, 4, 1});
  const Dataset ds({g.Column()});
  const View v({1}, {.rows = 1, .length = 3, .width = 3});
  const std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { CollateView(ds, v.view, BatchLayout{}, CollateOptions{}); });
  EXPECT_TRUE(Contains(message,
                       "column 'image', example 1 is 4 x 1 but batch 0 has room for "
                       "3 x 3"))
      << message;
  const std::vector<Array> cut =
      CollateView(ds, v.view, BatchLayout{.allow_truncate = true}, CollateOptions{});
  EXPECT_EQ(Values<int32_t>(Find(cut, "image_lengths")), (std::vector<int32_t>{3, 1}));
  // Example 1's cells are 1000..1003, one per row: rows 0..2 kept.
  EXPECT_EQ(Values<int16_t>(Find(cut, "image")),
            (std::vector<int16_t>{1000, 0, 0, 1001, 0, 0, 1002, 0, 0}));
}

TEST(GridCollatorTest, PackedBatchRefusesAGridColumn) {
  const Grid g("image", 1, {2, 3});
  const Dataset ds({g.Column()});
  const View v({0}, {.rows = 1, .length = 8, .segments = 2});
  const std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { CollateView(ds, v.view, BatchLayout{.packed = true}, CollateOptions{}); });
  EXPECT_TRUE(Contains(message, "column 'image' is a grid")) << message;
  EXPECT_TRUE(Contains(message, "PatchPack")) << message;
}

}  // namespace
}  // namespace jaxbatch
