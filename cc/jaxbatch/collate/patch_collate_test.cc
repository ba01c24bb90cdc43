// Tests for collate/patch_collate: every output of random PatchPack batches
// against a naive reference that reads each patch's pixels one by one by
// their (y, x, channel) index, the pad value, threads, and the errors of a
// plan made from other sizes.
#include "jaxbatch/collate/patch_collate.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/plan/patch_pack.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

struct Images {
  std::vector<std::vector<float>> pixels;  // [h, w, c] each
  std::vector<int64_t> h, w;
  int64_t c = 1;
  PatchImages source() const {
    return [this](int64_t i) {
      const auto k = static_cast<size_t>(i);
      return PatchImage{reinterpret_cast<const uint8_t*>(pixels[k].data()), h[k], w[k]};
    };
  }
};

Images RandomImages(std::mt19937_64& rng, int64_t n, int64_t c, int64_t max_side) {
  Images im;
  im.c = c;
  for (int64_t i = 0; i < n; ++i) {
    im.h.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(max_side + 1)));
    im.w.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(max_side + 1)));
    std::vector<float> p(static_cast<size_t>(im.h.back() * im.w.back() * c));
    for (float& v : p) v = static_cast<float>(rng() % 1000) + 1.0f;  // never the pad value
    im.pixels.push_back(std::move(p));
  }
  return im;
}

template <typename T>
const T* As(const Array& a) {
  return reinterpret_cast<const T*>(a.data);
}

const Array& Named(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array " << name;
  return arrays.front();
}

// The batch as the naive reference lays it out, compared with `arrays`.
void ExpectBatch(const Images& im, const BatchView& view, const PatchPackOptions& o, int64_t epoch,
                 float pad, const std::vector<Array>& arrays) {
  const int64_t ph = o.patch[0], pw = o.patch[1], L = view.shape.length, S = view.shape.segments;
  const int64_t patch = ph * pw * im.c;
  std::vector<float> values(static_cast<size_t>(view.shape.rows * L * patch), pad);
  std::vector<int32_t> ids(static_cast<size_t>(view.shape.rows * L), 0), pixels(ids.size(), 0);
  std::vector<int32_t> positions(ids.size() * 2, 0);
  std::vector<int32_t> patches(static_cast<size_t>(view.shape.rows * S), 0);
  std::vector<int64_t> index(patches.size(), -1);
  for (int64_t r = 0; r < view.stored_rows(); ++r) {
    int64_t slot = 0;
    const auto row = view.row_examples(r);
    for (size_t s = 0; s < row.size(); ++s) {
      const auto e = static_cast<size_t>(row[s]);
      const int64_t gh = (im.h[e] + ph - 1) / ph, gw = (im.w[e] + pw - 1) / pw;
      const size_t q = static_cast<size_t>(view.row_begin[r]) + s;
      std::vector<int64_t> kept;
      if (!view.starts.empty()) {
        for (int64_t k = 0; k < view.piece_lengths[q]; ++k) kept.push_back(view.starts[q] + k);
      } else {
        kept = KeptPatchIds(gh * gw, o, epoch, row[s]);
      }
      for (int64_t p : kept) {
        const int64_t pr = p / gw, pc = p % gw, cell = r * L + slot;
        ids[static_cast<size_t>(cell)] = static_cast<int32_t>(s + 1);
        positions[static_cast<size_t>(2 * cell)] = static_cast<int32_t>(pr);
        positions[static_cast<size_t>(2 * cell + 1)] = static_cast<int32_t>(pc);
        for (int64_t py = 0; py < ph; ++py) {
          for (int64_t px = 0; px < pw; ++px) {
            const int64_t y = pr * ph + py, x = pc * pw + px;
            if (y >= im.h[e] || x >= im.w[e]) continue;
            ++pixels[static_cast<size_t>(cell)];
            for (int64_t ch = 0; ch < im.c; ++ch) {
              values[static_cast<size_t>(cell * patch + (py * pw + px) * im.c + ch)] =
                  im.pixels[e][static_cast<size_t>((y * im.w[e] + x) * im.c + ch)];
            }
          }
        }
        ++slot;
      }
      patches[static_cast<size_t>(r * S) + s] = static_cast<int32_t>(kept.size());
      index[static_cast<size_t>(r * S) + s] = row[s];
    }
  }
  const Array& v = Named(arrays, "image");
  EXPECT_EQ(v.shape, (std::vector<int64_t>{view.shape.rows, L, patch}));
  EXPECT_EQ(std::vector<float>(As<float>(v), As<float>(v) + values.size()), values);
  const Array& pos = Named(arrays, "image_positions");
  EXPECT_EQ(pos.shape, (std::vector<int64_t>{view.shape.rows, L, 2}));
  EXPECT_EQ(std::vector<int32_t>(As<int32_t>(pos), As<int32_t>(pos) + positions.size()), positions);
  auto ints = [&](const std::string& name) {
    const Array& a = Named(arrays, name);
    return std::vector<int32_t>(As<int32_t>(a), As<int32_t>(a) + a.num_bytes() / 4);
  };
  EXPECT_EQ(ints("image_segment_ids"), ids);
  EXPECT_EQ(ints("image_pixels"), pixels);
  EXPECT_EQ(ints("image_patches"), patches);
  const Array& ex = Named(arrays, "example_index");
  EXPECT_EQ(std::vector<int64_t>(As<int64_t>(ex), As<int64_t>(ex) + index.size()), index);
}

void CheckPlan(const Images& im, const PatchPackOptions& o, int64_t epoch, float pad,
               int64_t threads) {
  const BatchPlan plan = PlanPatchPack(im.h, im.w, {}, o);
  CollateOptions options;
  options.default_pad_value = pad;
  options.num_threads = threads;
  options.min_bytes_per_thread = 1;
  const PatchColumn column{"image", DType::kFloat32, {im.c}};
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    const BatchView view = plan.batch(b);
    const std::vector<Array> arrays = CollatePatches(im.source(), column, view, o, epoch, options);
    ExpectBatch(im, view, o, epoch, pad, arrays);
    EXPECT_EQ(arrays.size(), plan.split ? 7u : 6u);
  }
}

TEST(PatchCollateTest, RandomImagesMatchNaiveReference) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const Images im = RandomImages(rng, 1 + static_cast<int64_t>(rng() % 12), 1 + trial % 3, 13);
    PatchPackOptions o{
        .patch = {1 + static_cast<int64_t>(rng() % 4), 1 + static_cast<int64_t>(rng() % 4)},
        .row_length = 48,
        .rows_per_batch = 2,
        .too_long = TooLong::kSkip,
        .partial_patches = PartialPatches::kPad};
    if (trial % 3 == 1) o.too_long = TooLong::kSplit;
    if (trial % 3 == 2) {
      o.drop_percent = 40;
      o.drop_seed = trial;
    }
    CheckPlan(im, o, /*epoch=*/trial, trial % 2 ? -1.0f : 0.0f, 1 + trial % 3);
  }
}

TEST(PatchCollateTest, SplitPiecesKeepTheImagesPatchRows) {
  Images im;
  im.h = {4};
  im.w = {3};
  im.pixels = {std::vector<float>(12)};
  for (int k = 0; k < 12; ++k) im.pixels[0][static_cast<size_t>(k)] = static_cast<float>(k);
  const PatchPackOptions o{
      .patch = {1, 1}, .row_length = 7, .rows_per_batch = 2, .too_long = TooLong::kSplit};
  const BatchPlan plan = PlanPatchPack(im.h, im.w, {}, o);
  const std::vector<Array> arrays =
      CollatePatches(im.source(), {"image", DType::kFloat32, {1}}, plan.batch(0), o, 0, {});
  // Two pieces of 2 patch rows: rows 0-1 and rows 2-3, positions from the image.
  const int32_t* pos = As<int32_t>(Named(arrays, "image_positions"));
  EXPECT_EQ(pos[0], 0);
  EXPECT_EQ(pos[2 * 7], 2);  // the second row's first patch is patch row 2
  const int64_t* piece = As<int64_t>(Named(arrays, "example_piece"));
  EXPECT_EQ(piece[0], 0);
  EXPECT_EQ(piece[plan.batch(0).shape.segments], 1);
  ExpectBatch(im, plan.batch(0), o, 0, 0.0f, arrays);
}

TEST(PatchCollateTest, PlanFromOtherSizesIsRefused) {
  Images im;
  im.h = {2, 2};
  im.w = {2, 2};
  im.pixels = {std::vector<float>(4), std::vector<float>(4)};
  const PatchPackOptions o{.patch = {1, 1}, .row_length = 8, .rows_per_batch = 1};
  const BatchPlan plan = PlanPatchPack(im.h, im.w, {}, o);  // both in one row
  im.h[1] = 4;
  im.pixels[1].resize(8);  // now 4 + 8 patches do not fit 8
  const std::string message = ThrownMessage<InvalidArgumentError>([&] {
    CollatePatches(im.source(), {"image", DType::kFloat32, {1}}, plan.batch(0), o, 0, {});
  });
  EXPECT_TRUE(Contains(message, "image 1 has 8 patches")) << message;
  EXPECT_TRUE(Contains(message, "other image sizes")) << message;
}

TEST(PatchCollateTest, GridColumnIsCutAsItsImages) {
  std::mt19937_64 rng(5);
  const Images im = RandomImages(rng, 9, 3, 11);
  std::vector<float> values;
  std::vector<int64_t> offsets = {0}, shapes;
  for (size_t i = 0; i < im.h.size(); ++i) {
    values.insert(values.end(), im.pixels[i].begin(), im.pixels[i].end());
    offsets.push_back(offsets.back() + im.h[i] * im.w[i]);
    shapes.insert(shapes.end(), {im.h[i], im.w[i]});
  }
  RaggedColumn cells = RaggedColumn::Ragged("image", DType::kFloat32, {3}, values.data(),
                                            offsets.back(), offsets.data(), 9, nullptr);
  const RaggedColumn grid = RaggedColumn::Grid(std::move(cells), shapes);
  const PatchPackOptions o{.patch = {3, 2},
                           .row_length = 40,
                           .rows_per_batch = 2,
                           .partial_patches = PartialPatches::kPad};
  const BatchPlan plan = PlanPatchPack(grid.Heights(), grid.Widths(), {}, o);
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    ExpectBatch(im, plan.batch(b), o, 0, 0.0f, CollatePatchColumn(grid, plan.batch(b), o, 0, {}));
  }
  RaggedColumn flat = RaggedColumn::Ragged("image", DType::kFloat32, {3}, values.data(),
                                           offsets.back(), offsets.data(), 9, nullptr);
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>(
                           [&] { CollatePatchColumn(flat, plan.batch(0), o, 0, {}); }),
                       "column 'image' is not an image column"));
}

}  // namespace
}  // namespace jaxbatch
