// Tests for the Loader's PatchPack batches (loader_patches.cc) and
// collate/patch_batch: each batch equals CollatePatchBatch over the
// epoch's schedule (the same order, the same epoch, so the same dropped
// patches), a per-image label laid out per segment against a reference,
// every image's patches once an epoch, restore mid-epoch, shards, threads,
// and the columns refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/collate/patch_batch.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::Drain;
using testing::Fingerprint;
using testing::ThrownMessage;

struct Images {
  std::shared_ptr<const Dataset> dataset;
  std::vector<int64_t> h, w;
};

// n float32 RGB images of random sizes (multiples of the 2 x 2 patch, up
// to 8 x 8), pixel values never 0 (the pad), and a fixed int32 "label"
// (100 + i); `ragged` adds a ragged "caption" column.
Images MakeImages(int64_t n, uint32_t seed, bool ragged = false) {
  std::mt19937 rng(seed);
  Images im;
  auto pixels = std::make_shared<std::vector<float>>();
  auto offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  auto labels = std::make_shared<std::vector<int32_t>>();
  std::vector<int64_t> shapes;
  for (int64_t i = 0; i < n; ++i) {
    im.h.push_back(2 * static_cast<int64_t>(rng() % 4 + 1));
    im.w.push_back(2 * static_cast<int64_t>(rng() % 4 + 1));
    shapes.push_back(im.h.back());
    shapes.push_back(im.w.back());
    for (int64_t k = 0; k < im.h.back() * im.w.back() * 3; ++k) {
      pixels->push_back(static_cast<float>(i * 1000 + k + 1));
    }
    offsets->push_back(static_cast<int64_t>(pixels->size() / 3));
    labels->push_back(static_cast<int32_t>(100 + i));
  }
  auto owner = std::make_shared<std::tuple<decltype(pixels), decltype(offsets), decltype(labels)>>(
      pixels, offsets, labels);
  RaggedColumn cells = RaggedColumn::Ragged("image", DType::kFloat32, {3}, pixels->data(),
                                            offsets->back(), offsets->data(), n, owner);
  std::vector<RaggedColumn> columns = {
      RaggedColumn::Grid(std::move(cells), shapes),
      RaggedColumn::Fixed("label", DType::kInt32, {}, labels->data(), n, owner)};
  if (ragged) {
    columns.push_back(RaggedColumn::Ragged("caption", DType::kFloat32, {}, pixels->data(),
                                           offsets->back() * 3, offsets->data(), n, owner));
  }
  im.dataset = std::make_shared<const Dataset>(std::move(columns));
  return im;
}

LoaderOptions PatchOptions(int64_t drop_percent = 0) {
  LoaderOptions options;
  options.schedule.planner = PatchPackOptions{.patch = {2, 2},
                                              .row_length = 24,
                                              .rows_per_batch = 2,
                                              .drop_percent = drop_percent,
                                              .drop_seed = 7};
  options.schedule.seed = 3;
  options.schedule.shuffle = ShuffleMode::kGlobal;
  options.num_threads = 3;
  options.epochs = 2;
  return options;
}

const Array& Named(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array " << name;
  return arrays.front();
}

// The reference stream: each epoch's schedule collated directly.
std::vector<std::string> Reference(const Images& im, const LoaderOptions& options) {
  std::vector<std::string> out;
  const std::vector<uint8_t> excluded(im.h.size(), 0);
  const auto& o = std::get<PatchPackOptions>(options.schedule.planner);
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    const EpochSchedule s = MakeEpochSchedule(im.h, excluded, options.schedule, epoch, {}, im.w);
    for (size_t t = 0; t < s.steps.size(); ++t) {
      LoadedBatch batch;
      batch.arrays = CollatePatchBatch(*im.dataset, "image", s.StepBatch(static_cast<int64_t>(t)),
                                       o, epoch, {});
      out.push_back(Fingerprint(batch));
    }
  }
  return out;
}

TEST(LoaderPatchesTest, BatchesEqualTheEpochsScheduleCollatedDirectly) {
  const Images im = MakeImages(40, 1);
  for (int64_t drop : {0, 40}) {
    const LoaderOptions options = PatchOptions(drop);
    Loader loader(im.dataset, options);
    const std::vector<std::string> got = Drain(loader);
    EXPECT_EQ(got, Reference(im, options)) << "drop_percent " << drop;
    EXPECT_GT(got.size(), 4u);
  }
}

TEST(LoaderPatchesTest, EveryPatchOnceAnEpochAndTheLabelPerSegment) {
  const Images im = MakeImages(30, 2);
  LoaderOptions options = PatchOptions();
  options.epochs = 1;
  Loader loader(im.dataset, options);
  std::map<int64_t, std::set<std::pair<int32_t, int32_t>>> seen;  // image -> positions
  int64_t real = 0;
  while (std::optional<LoadedBatch> batch = loader.Next()) {
    EXPECT_TRUE(batch->packed);
    const Array& index = Named(batch->arrays, std::string(kExampleIndexName));
    const Array& label = Named(batch->arrays, "label");
    const Array& ids = Named(batch->arrays, "image_segment_ids");
    const Array& pos = Named(batch->arrays, "image_positions");
    const Array& values = Named(batch->arrays, "image");
    ASSERT_EQ(label.shape, index.shape);  // [rows, segments]
    const int64_t rows = index.shape[0], segments = index.shape[1], cells = ids.shape[1];
    const auto* e = reinterpret_cast<const int64_t*>(index.data);
    const auto* l = reinterpret_cast<const int32_t*>(label.data);
    for (int64_t k = 0; k < rows * segments; ++k) {
      EXPECT_EQ(l[k], e[k] >= 0 ? 100 + e[k] : 0);
    }
    const auto* id = reinterpret_cast<const int32_t*>(ids.data);
    const auto* p = reinterpret_cast<const int32_t*>(pos.data);
    const auto* v = reinterpret_cast<const float*>(values.data);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cells; ++c) {
        const int64_t slot = r * cells + c;
        if (id[slot] == 0) continue;
        ++real;
        const int64_t image = e[r * segments + id[slot] - 1];
        const int32_t pr = p[2 * slot], pc = p[2 * slot + 1];
        EXPECT_TRUE(seen[image].insert({pr, pc}).second);
        // Pixel (y, x, ch) of the patch is image value y * w * 3 + x * 3 + ch + 1.
        const int64_t w = im.w[static_cast<size_t>(image)];
        for (int64_t k = 0; k < 12; ++k) {
          const int64_t y = pr * 2 + k / 6, x = pc * 2 + (k / 3) % 2, ch = k % 3;
          EXPECT_EQ(v[slot * 12 + k], static_cast<float>(image * 1000 + (y * w + x) * 3 + ch + 1));
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), im.h.size());
  int64_t patches = 0;
  for (size_t i = 0; i < im.h.size(); ++i) {
    EXPECT_EQ(static_cast<int64_t>(seen[static_cast<int64_t>(i)].size()), im.h[i] * im.w[i] / 4);
    patches += im.h[i] * im.w[i] / 4;
  }
  EXPECT_EQ(real, patches);
  EXPECT_EQ(loader.state().real_elements, patches);
}

TEST(LoaderPatchesTest, RestoreMidEpochGivesTheSameRemainingBatches) {
  const Images im = MakeImages(40, 3);
  const LoaderOptions options = PatchOptions(/*drop_percent=*/30);
  Loader full(im.dataset, options);
  const std::vector<std::string> all = Drain(full);
  for (const int64_t at : {int64_t{1}, static_cast<int64_t>(all.size()) / 2 + 1}) {
    Loader first(im.dataset, options);
    Drain(first, at);
    const LoaderState state = first.state();
    first.Close();
    Loader rest(im.dataset, options, state);
    const std::vector<std::string> tail = Drain(rest);
    EXPECT_EQ(tail, std::vector<std::string>(all.begin() + at, all.end())) << "at " << at;
  }
}

TEST(LoaderPatchesTest, ShardsPartitionTheImages) {
  const Images im = MakeImages(50, 4);
  std::multiset<int64_t> images;
  int64_t steps = -1;
  for (int64_t shard = 0; shard < 3; ++shard) {
    LoaderOptions options = PatchOptions();
    options.epochs = 1;
    options.schedule.shard_index = shard;
    options.schedule.shard_count = 3;
    options.schedule.planner = PatchPackOptions{
        .patch = {2, 2}, .row_length = 24, .rows_per_batch = 2, .remainder = Remainder::kPad};
    Loader loader(im.dataset, options);
    int64_t n = 0;
    while (std::optional<LoadedBatch> batch = loader.Next()) {
      ++n;
      const Array& index = Named(batch->arrays, std::string(kExampleIndexName));
      const auto* e = reinterpret_cast<const int64_t*>(index.data);
      for (int64_t k = 0; k < index.shape[0] * index.shape[1]; ++k) {
        if (e[k] >= 0) images.insert(e[k]);
      }
    }
    if (steps >= 0) {
      EXPECT_EQ(n, steps);  // every shard as many steps
    }
    steps = n;
  }
  std::multiset<int64_t> want;
  for (int64_t i = 0; i < 50; ++i) want.insert(i);
  EXPECT_EQ(images, want);
}

TEST(LoaderPatchesTest, RefusesColumnsWithNoPlaceInAPatchRow) {
  const Images im = MakeImages(6, 5, /*ragged=*/true);
  const std::string message =
      ThrownMessage<InvalidArgumentError>([&] { Loader loader(im.dataset, PatchOptions()); });
  EXPECT_TRUE(Contains(message, "Loader: PatchPack packs column 'image'")) << message;
  EXPECT_TRUE(Contains(message, "column 'caption' is ragged")) << message;
  LoaderOptions by_label = PatchOptions();
  by_label.length_column = "label";
  const std::string fixed =
      ThrownMessage<InvalidArgumentError>([&] { Loader loader(im.dataset, by_label); });
  EXPECT_TRUE(Contains(fixed, "fixed-shape")) << fixed;
}

}  // namespace
}  // namespace jaxbatch
