// Tests for grid columns (two variable axes) and tied axes in a Dataset.
//
// The reference is the obvious one: a grid example i is h_i x w_i cells laid
// out row-major from offsets[i], and a tie holds when every axis of one name
// has one size in each example.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/dataset_builder.h"
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/data/ragged_column.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

// Examples of shapes (2, 3), (1, 1), (0, 4): 6 + 1 + 0 cells of 2 floats.
struct Images {
  std::vector<float> values = std::vector<float>(14);
  std::vector<int64_t> offsets = {0, 6, 7, 7};
  std::vector<int64_t> shapes = {2, 3, 1, 1, 0, 4};
  Images() {
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
  }
  RaggedColumn Cells(const std::string& name = "image") const {
    return RaggedColumn::Ragged(name, DType::kFloat32, {2}, values.data(), 7, offsets.data(), 3,
                                nullptr);
  }
  RaggedColumn Grid(const std::string& name = "image") const {
    return RaggedColumn::Grid(Cells(name), shapes);
  }
};

// Square pair features [L, L] for L = 2, 3, 1 beside tokens of those lengths.
struct Pairs {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> token_offsets = {0, 2, 5, 6};
  std::vector<float> pair = std::vector<float>(16, 0.5F);  // 14 cells in use, or 15
  std::vector<int64_t> pair_offsets = {0, 4, 13, 14};
  std::vector<int64_t> pair_shapes = {2, 2, 3, 3, 1, 1};
  RaggedColumn Tokens(std::vector<std::string> axes = {"L"}) const {
    return RaggedColumn::WithAxes(RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(),
                                                       6, token_offsets.data(), 3, nullptr),
                                  std::move(axes));
  }
  RaggedColumn Pair(std::vector<int64_t> shapes, std::vector<int64_t> offsets,
                    std::vector<std::string> axes = {"L", "L"}) {
    pair_shapes = std::move(shapes);
    pair_offsets = std::move(offsets);
    return RaggedColumn::WithAxes(
        RaggedColumn::Grid(RaggedColumn::Ragged("pair", DType::kFloat32, {}, pair.data(), 16,
                                                pair_offsets.data(), 3, nullptr),
                           pair_shapes),
        std::move(axes));
  }
};

TEST(GridColumnTest, KeepsShapesAndCellsAsRows) {
  const Images f;
  const RaggedColumn col = f.Grid();
  EXPECT_TRUE(col.is_grid());
  EXPECT_FALSE(f.Cells().is_grid());
  ASSERT_EQ(col.num_examples(), 3);
  EXPECT_EQ(col.height(0), 2);
  EXPECT_EQ(col.width(0), 3);
  EXPECT_EQ(col.height(2), 0);
  EXPECT_EQ(col.width(2), 4);
  EXPECT_EQ(col.Lengths(), (std::vector<int64_t>{6, 1, 0}));  // cells
  EXPECT_EQ(col.Heights(), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(col.Widths(), (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(col.row_bytes(), 8);
  // Example 1's one cell is value rows 6: floats 12, 13.
  const auto* cell = reinterpret_cast<const float*>(col.example_data(1));
  EXPECT_EQ(cell[0], 12.0F);
  EXPECT_EQ(cell[1], 13.0F);
}

TEST(GridColumnTest, ShapeDisagreeingWithOffsetsNamesColumnExampleAndSizes) {
  const Images f;
  const std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { RaggedColumn::Grid(f.Cells(), {2, 3, 1, 2, 0, 4}); });
  EXPECT_TRUE(Contains(message, "column 'image', example 1")) << message;
  EXPECT_TRUE(Contains(message, "(1, 2)")) << message;
  EXPECT_TRUE(Contains(message, "hold 1")) << message;
}

TEST(GridColumnTest, BadShapeListsAndFixedCellsThrow) {
  const Images f;
  EXPECT_TRUE(
      Contains(ThrownMessage<InvalidArgumentError>([&] { RaggedColumn::Grid(f.Cells(), {2, 3}); }),
               "expected 2 sizes (h, w) for each of 3 examples, found 2"));
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>(
                           [&] { RaggedColumn::Grid(f.Cells(), {-2, -3, 1, 1, 0, 4}); }),
                       "example 0: expected sizes (h, w) >= 0, found (-2, -3)"));
  const RaggedColumn fixed =
      RaggedColumn::Fixed("image", DType::kFloat32, {2}, f.values.data(), 3, nullptr);
  EXPECT_TRUE(Contains(
      ThrownMessage<InvalidArgumentError>([&] { RaggedColumn::Grid(fixed, f.shapes); }), "fixed"));
  EXPECT_TRUE(Contains(
      ThrownMessage<InvalidArgumentError>([&] { RaggedColumn::WithAxes(f.Grid(), {"L"}); }),
      "expected 2 axis names for a grid column, found 1"));
}

TEST(GridColumnTest, GatheredCellsBecomeAGridInTheirOrder) {
  const Images f;
  const std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(f.values.data()),
                                   reinterpret_cast<const uint8_t*>(f.values.data()) + 56);
  const std::vector<RaggedColumn::Chunk> chunks = {{bytes, f.offsets, 3}};
  const std::vector<int64_t> order = {2, 0};
  const RaggedColumn gathered = RaggedColumn::Gathered("image", DType::kFloat32, {2}, false, chunks,
                                                       std::span(order), nullptr);
  const RaggedColumn grid = RaggedColumn::Grid(gathered, {0, 4, 2, 3});
  EXPECT_EQ(grid.Heights(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(grid.Lengths(), (std::vector<int64_t>{0, 6}));
  EXPECT_TRUE(Contains(
      ThrownMessage<InvalidArgumentError>([&] { RaggedColumn::Grid(gathered, {2, 3, 0, 4}); }),
      "example 0"));
}

TEST(GridColumnTest, SquareAndTiedAxesAreChecked) {
  Pairs f;
  const Dataset ds({f.Tokens(), f.Pair({2, 2, 3, 3, 1, 1}, {0, 4, 13, 14})});
  EXPECT_TRUE(ds.IsTiedSquare(ds.column("pair"), "tokens"));
  EXPECT_FALSE(ds.IsTiedSquare(ds.column("tokens"), "pair"));

  // Square but not as long as its tokens at example 1 (2 x 2 vs 3 tokens).
  std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Tokens(), f.Pair({2, 2, 2, 2, 1, 1}, {0, 4, 8, 9})}); });
  EXPECT_TRUE(Contains(message, "example 1")) << message;
  EXPECT_TRUE(Contains(message, "axis 'L'")) << message;
  EXPECT_TRUE(Contains(message, "column 'tokens' axis 0 is 3")) << message;
  EXPECT_TRUE(Contains(message, "column 'pair' axis 0 is 2")) << message;

  // Not square at example 2 (1 x 2); no 1-D column needed to tie L with L.
  message = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Pair({2, 2, 3, 3, 1, 2}, {0, 4, 13, 15})}); });
  EXPECT_TRUE(Contains(message, "example 2")) << message;
  EXPECT_TRUE(Contains(message, "column 'pair' axis 0 is 1, column 'pair' axis 1 is 2")) << message;

  // A part of a larger data set (a file's row group starting at example 40)
  // names the example as the whole data does.
  message = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Pair({2, 2, 3, 3, 1, 2}, {0, 4, 13, 15})}, {}, 40); });
  EXPECT_TRUE(Contains(message, "example 42:")) << message;

  // Independent axes: any shapes.
  const Dataset free({f.Tokens({"n"}), f.Pair({2, 2, 3, 3, 1, 2}, {0, 4, 13, 15}, {"h", "w"})});
  EXPECT_FALSE(free.IsTiedSquare(free.column("pair"), "tokens"));
}

TEST(GridColumnTest, AlignedGridColumnsMustShareShapes) {
  const Images f;
  const Dataset ds({f.Grid("image"), f.Grid("mask")}, {{"image", "mask"}});
  EXPECT_TRUE(ds.AreAligned("image", "mask"));
  // Same cell counts (6, 1, 0), other shapes (3 x 2): refused.
  const RaggedColumn transposed = RaggedColumn::Grid(f.Cells("mask"), {3, 2, 1, 1, 0, 4});
  const std::string message = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Grid("image"), transposed}, {{"image", "mask"}}); });
  EXPECT_TRUE(Contains(message, "differ at example 0: 'image' is 2 x 3, 'mask' is 3 x 2"))
      << message;
  const std::string later = ThrownMessage<InvalidArgumentError>(
      [&] { Dataset({f.Grid("image"), transposed}, {{"image", "mask"}}, 7); });
  EXPECT_TRUE(Contains(later, "differ at example 7:")) << later;
}

TEST(GridColumnTest, BuilderCopiesShapesAndAxes) {
  Pairs f;
  const Dataset ds({f.Tokens(), f.Pair({2, 2, 3, 3, 1, 1}, {0, 4, 13, 14})});
  DatasetBuilder builder(ds);
  builder.Append(ds, 2);
  builder.Append(ds, 0);
  const Dataset two = std::move(builder).Finish();
  const RaggedColumn& pair = two.column("pair");
  ASSERT_TRUE(pair.is_grid());
  EXPECT_EQ(pair.Heights(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(pair.Widths(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(pair.axes(), (std::vector<std::string>{"L", "L"}));
  EXPECT_TRUE(two.IsTiedSquare(pair, "tokens"));
  EXPECT_EQ(OwnedCopy(ds).column("pair").Heights(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(DatasetFingerprint(OwnedCopy(ds)), DatasetFingerprint(ds));

  // A chunk whose column is not a grid does not fit the builder.
  const Dataset flat({f.Tokens(), RaggedColumn::Ragged("pair", DType::kFloat32, {}, f.pair.data(),
                                                       14, f.pair_offsets.data(), 3, nullptr)});
  EXPECT_TRUE(Contains(
      ThrownMessage<InvalidArgumentError>([&] { DatasetBuilder(ds).CheckColumns(flat); }), "grid"));
}

TEST(GridColumnTest, FingerprintSeesShapes) {
  const Images f;
  const RaggedColumn other = RaggedColumn::Grid(f.Cells(), {3, 2, 1, 1, 0, 4});
  EXPECT_NE(DatasetFingerprint(Dataset({f.Grid()})), DatasetFingerprint(Dataset({other})));
  EXPECT_NE(LayoutFingerprint(Dataset({f.Grid()})), LayoutFingerprint(Dataset({other})));
}

}  // namespace
}  // namespace jaxbatch
