// Tests for collate/: every batch of padded and packed plans against a naive
// reference collation that walks the plan's flat vectors element by element
// and writes pad values from hand-encoded bytes (not EncodeScalar).
#include "jaxbatch/collate/collator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/data/dataset.h"
#include "jaxbatch/data/ragged_column.h"
#include "jaxbatch/plan/batch_plan.h"
#include "jaxbatch/plan/planner.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::ThrownMessage;

template <typename T>
std::vector<uint8_t> Bytes(T value) {
  std::vector<uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

template <typename T>
std::vector<T> Values(const Array& array) {
  EXPECT_EQ(array.num_bytes() % static_cast<int64_t>(sizeof(T)), 0);
  std::vector<T> out(static_cast<size_t>(array.num_bytes()) / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), array.data, out.size() * sizeof(T));
  return out;
}

const Array& Find(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array '" << name << "'";
  static const Array kNone;
  return kNone;
}

// ---- Source data kept as plain per-example bytes ---------------------------

struct SourceColumn {
  std::string name;
  DType dtype = DType::kInt32;
  std::vector<int64_t> inner_shape;
  bool fixed = false;
  std::vector<std::vector<uint8_t>> examples;  // Each example's elements, row-major.
  // What the RaggedColumn points at.
  std::vector<uint8_t> flat;
  std::vector<int64_t> offsets;

  size_t item() const { return ItemSize(dtype); }
  int64_t inner() const {
    int64_t n = 1;
    for (int64_t d : inner_shape) n *= d;
    return n;
  }
  int64_t row_bytes() const { return inner() * static_cast<int64_t>(item()); }
  int64_t length(int64_t i) const {
    return static_cast<int64_t>(examples[static_cast<size_t>(i)].size()) / row_bytes();
  }
  int64_t max_length() const {
    int64_t longest = 0;
    for (size_t i = 0; i < examples.size(); ++i) {
      longest = std::max(longest, length(static_cast<int64_t>(i)));
    }
    return longest;
  }
  RaggedColumn Column() const {
    const auto n = static_cast<int64_t>(examples.size());
    if (fixed) return RaggedColumn::Fixed(name, dtype, inner_shape, flat.data(), n, nullptr);
    return RaggedColumn::Ragged(name, dtype, inner_shape, flat.data(), offsets.back(),
                                offsets.data(), n, nullptr);
  }
};

// Makes a column whose example i has lengths[i] rows (1 when fixed) of
// distinct, deterministic bytes.
SourceColumn MakeColumn(std::string name, DType dtype, std::vector<int64_t> inner_shape, bool fixed,
                        const std::vector<int64_t>& lengths, uint8_t salt) {
  SourceColumn c;
  c.name = std::move(name);
  c.dtype = dtype;
  c.inner_shape = std::move(inner_shape);
  c.fixed = fixed;
  c.offsets.push_back(0);
  uint32_t counter = salt;
  for (int64_t length : lengths) {
    const int64_t rows = fixed ? 1 : length;
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * c.row_bytes()));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>((counter++ * 37u + salt) >> 1);
    c.flat.insert(c.flat.end(), bytes.begin(), bytes.end());
    c.offsets.push_back(c.offsets.back() + rows);
    c.examples.push_back(std::move(bytes));
  }
  return c;
}

struct Source {
  std::vector<SourceColumn> columns;

  const SourceColumn& column(const std::string& name) const {
    for (const SourceColumn& c : columns) {
      if (c.name == name) return c;
    }
    ADD_FAILURE() << "no source column " << name;
    return columns.front();
  }
  // A dataset over the named columns (all when empty), tokens, labels,
  // weights and emb aligned.
  Dataset MakeDataset(const std::set<std::string>& names = {}) const {
    std::vector<RaggedColumn> cols;
    std::vector<std::string> group;
    for (const SourceColumn& c : columns) {
      if (!names.empty() && !names.count(c.name)) continue;
      cols.push_back(c.Column());
      if (c.name == "tokens" || c.name == "labels" || c.name == "weights" || c.name == "emb") {
        group.push_back(c.name);
      }
    }
    return Dataset(std::move(cols), {group});
  }
};

// tokens/labels/weights/emb share lengths up to max_length; meta has its own
// lengths; id and feat are fixed.
Source MakeSource(std::mt19937& rng, int n, int64_t max_length) {
  std::vector<int64_t> lengths, meta_lengths;
  for (int i = 0; i < n; ++i) {
    lengths.push_back(std::uniform_int_distribution<int64_t>(0, max_length)(rng));
    meta_lengths.push_back(std::uniform_int_distribution<int64_t>(0, 5)(rng));
  }
  Source s;
  s.columns.push_back(MakeColumn("tokens", DType::kInt32, {}, false, lengths, 1));
  s.columns.push_back(MakeColumn("labels", DType::kInt32, {}, false, lengths, 2));
  s.columns.push_back(MakeColumn("weights", DType::kFloat32, {3}, false, lengths, 3));
  s.columns.push_back(MakeColumn("emb", DType::kBFloat16, {2}, false, lengths, 4));
  s.columns.push_back(MakeColumn("meta", DType::kInt8, {}, false, meta_lengths, 5));
  s.columns.push_back(MakeColumn("id", DType::kInt64, {}, true, lengths, 6));
  s.columns.push_back(MakeColumn("feat", DType::kFloat32, {2}, true, lengths, 7));
  return s;
}

// Pad values as options and as hand-encoded bytes. Collate refuses a pad
// value for a column the data set lacks, so a subset keeps only its own.
CollateOptions PadOptions(const Dataset* ds = nullptr) {
  CollateOptions o;
  o.pad_values = {{"labels", -100}, {"weights", -1.5}, {"emb", -1.0}, {"meta", 3}, {"id", -1}};
  if (ds != nullptr) {
    std::erase_if(o.pad_values, [ds](const auto& entry) { return !ds->has_column(entry.first); });
  }
  return o;
}

std::vector<uint8_t> PadBytes(const SourceColumn& c) {
  if (c.name == "labels") return Bytes<int32_t>(-100);
  if (c.name == "weights") return Bytes<float>(-1.5f);
  if (c.name == "emb") return Bytes<uint16_t>(0xBF80);  // bfloat16 -1.0.
  if (c.name == "meta") return Bytes<int8_t>(3);
  if (c.name == "id") return Bytes<int64_t>(-1);
  return std::vector<uint8_t>(c.item(), 0);
}

// ---- The reference collation -----------------------------------------------

struct RefArray {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<int64_t> WithInner(std::vector<int64_t> lead, const SourceColumn& c) {
  lead.insert(lead.end(), c.inner_shape.begin(), c.inner_shape.end());
  return lead;
}

// Appends element `k` (of c.inner()) of row `t` of example `e`, or the pad.
void PushElement(std::vector<uint8_t>& out, const SourceColumn& c, int64_t e, int64_t t, int64_t k,
                 const std::vector<uint8_t>& pad) {
  if (e < 0) {
    out.insert(out.end(), pad.begin(), pad.end());
    return;
  }
  const std::vector<uint8_t>& src = c.examples[static_cast<size_t>(e)];
  const size_t at = static_cast<size_t>((t * c.inner() + k) * static_cast<int64_t>(c.item()));
  out.insert(out.end(), src.begin() + static_cast<ptrdiff_t>(at),
             src.begin() + static_cast<ptrdiff_t>(at + c.item()));
}

template <typename T>
void Push(std::vector<uint8_t>& out, T value) {
  const std::vector<uint8_t> b = Bytes(value);
  out.insert(out.end(), b.begin(), b.end());
}

std::vector<RefArray> NaiveCollate(
    const Source& source, const std::vector<std::string>& names,
    const std::set<std::string>& aligned, const BatchPlan& plan, int64_t b,
    const std::function<std::vector<uint8_t>(const SourceColumn&)>& pad_of) {
  const BatchShape shape =
      plan.shapes[static_cast<size_t>(plan.batch_shape_ids[static_cast<size_t>(b)])];
  const int64_t rows = shape.rows, length = shape.length, segments = shape.segments;
  // The examples of each stored row, straight from the flat vectors.
  std::vector<std::vector<int64_t>> row_ids;
  for (int64_t r = plan.batch_row_begin[static_cast<size_t>(b)];
       r < plan.batch_row_begin[static_cast<size_t>(b) + 1]; ++r) {
    row_ids.emplace_back(
        plan.example_ids.begin() + plan.row_example_begin[static_cast<size_t>(r)],
        plan.example_ids.begin() + plan.row_example_begin[static_cast<size_t>(r) + 1]);
  }
  EXPECT_LE(static_cast<int64_t>(row_ids.size()), rows);
  row_ids.resize(static_cast<size_t>(rows));  // the padding rows are not stored
  const int64_t slots = plan.packed ? segments : 1;
  std::vector<RefArray> out;
  for (const std::string& name : names) {
    const SourceColumn& c = source.column(name);
    const std::vector<uint8_t> pad = pad_of(c);
    if (c.fixed) {
      RefArray values{
          c.name,
          c.dtype,
          WithInner(plan.packed ? std::vector<int64_t>{rows, slots} : std::vector<int64_t>{rows},
                    c),
          {}};
      for (const std::vector<int64_t>& row : row_ids) {
        for (int64_t s = 0; s < slots; ++s) {
          const int64_t e = s < static_cast<int64_t>(row.size()) ? row[static_cast<size_t>(s)] : -1;
          for (int64_t k = 0; k < c.inner(); ++k) PushElement(values.bytes, c, e, 0, k, pad);
        }
      }
      out.push_back(values);
    } else if (!plan.packed) {
      const int64_t width = aligned.count(c.name) ? length : c.max_length();
      RefArray values{c.name, c.dtype, WithInner({rows, width}, c), {}};
      RefArray mask{c.name + "_mask", DType::kBool, {rows, width}, {}};
      RefArray lengths{c.name + "_lengths", DType::kInt32, {rows}, {}};
      RefArray ids{c.name + "_segment_ids", DType::kInt32, {rows, width}, {}};
      RefArray positions{c.name + "_positions", DType::kInt32, {rows, width}, {}};
      for (const std::vector<int64_t>& row : row_ids) {
        const int64_t e = row.empty() ? -1 : row[0];
        const int64_t n = e < 0 ? 0 : std::min(c.length(e), width);
        for (int64_t t = 0; t < width; ++t) {
          for (int64_t k = 0; k < c.inner(); ++k) {
            PushElement(values.bytes, c, t < n ? e : -1, t, k, pad);
          }
          mask.bytes.push_back(t < n ? 1 : 0);
          Push<int32_t>(ids.bytes, t < n ? 1 : 0);
          Push<int32_t>(positions.bytes, static_cast<int32_t>(t < n ? t : 0));
        }
        Push<int32_t>(lengths.bytes, static_cast<int32_t>(n));
      }
      out.insert(out.end(), {values, mask, lengths, ids, positions});
    } else {
      RefArray values{c.name, c.dtype, WithInner({rows, length}, c), {}};
      RefArray ids{c.name + "_segment_ids", DType::kInt32, {rows, length}, {}};
      RefArray positions{c.name + "_positions", DType::kInt32, {rows, length}, {}};
      RefArray lengths{c.name + "_lengths", DType::kInt32, {rows, segments}, {}};
      RefArray starts{c.name + "_segment_starts", DType::kInt32, {rows, segments}, {}};
      for (const std::vector<int64_t>& row : row_ids) {
        std::vector<int64_t> owner(static_cast<size_t>(length), -1),
            pos(static_cast<size_t>(length), 0);
        std::vector<int32_t> segment(static_cast<size_t>(length), 0);
        std::vector<int32_t> seg_lengths(static_cast<size_t>(segments), 0);
        int64_t t = 0;
        for (size_t s = 0; s < row.size(); ++s) {
          const int64_t n = std::min(c.length(row[s]), length - t);
          for (int64_t q = 0; q < n; ++q, ++t) {
            owner[static_cast<size_t>(t)] = row[s];
            pos[static_cast<size_t>(t)] = q;
            segment[static_cast<size_t>(t)] = static_cast<int32_t>(s + 1);
          }
          seg_lengths[s] = static_cast<int32_t>(n);
        }
        for (int64_t u = 0; u < length; ++u) {
          const int64_t e = owner[static_cast<size_t>(u)];
          for (int64_t k = 0; k < c.inner(); ++k) {
            PushElement(values.bytes, c, e, pos[static_cast<size_t>(u)], k, pad);
          }
          Push<int32_t>(ids.bytes, segment[static_cast<size_t>(u)]);
          Push<int32_t>(positions.bytes, static_cast<int32_t>(pos[static_cast<size_t>(u)]));
        }
        int32_t start = 0;  // Back to back from 0; unused slots start where the tokens end.
        for (int32_t l : seg_lengths) {
          Push<int32_t>(lengths.bytes, l);
          Push<int32_t>(starts.bytes, start);
          start += l;
        }
      }
      out.insert(out.end(), {values, ids, positions, lengths, starts});
    }
  }
  RefArray index{"example_index",
                 DType::kInt64,
                 plan.packed ? std::vector<int64_t>{rows, slots} : std::vector<int64_t>{rows},
                 {}};
  for (const std::vector<int64_t>& row : row_ids) {
    for (int64_t s = 0; s < slots; ++s) {
      Push<int64_t>(index.bytes,
                    s < static_cast<int64_t>(row.size()) ? row[static_cast<size_t>(s)] : -1);
    }
  }
  out.push_back(index);
  return out;
}

void ExpectSame(const std::vector<Array>& got, const std::vector<RefArray>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t a = 0; a < got.size(); ++a) {
    SCOPED_TRACE(want[a].name);
    EXPECT_EQ(got[a].name, want[a].name);
    EXPECT_EQ(got[a].dtype, want[a].dtype);
    EXPECT_EQ(got[a].shape, want[a].shape);
    ASSERT_EQ(got[a].num_bytes(), static_cast<int64_t>(want[a].bytes.size()));
    EXPECT_TRUE(got[a].owner != nullptr);
    const std::vector<uint8_t> bytes(got[a].data, got[a].data + got[a].num_bytes());
    EXPECT_EQ(bytes, want[a].bytes);
  }
}

const std::set<std::string> kAligned = {"tokens", "labels", "weights", "emb"};
const std::vector<std::string> kAll = {"tokens", "labels", "weights", "emb", "meta", "id", "feat"};
const std::vector<std::string> kPackable = {"tokens", "labels", "weights", "emb", "id", "feat"};

// Collates every batch of `plan` and compares it with the reference.
void CheckEveryBatch(const Source& source, const Dataset& ds, const std::vector<std::string>& names,
                     const std::set<std::string>& aligned, const BatchPlan& plan,
                     const CollateOptions& options,
                     const std::function<std::vector<uint8_t>(const SourceColumn&)>& pad_of) {
  ASSERT_GT(plan.num_batches(), 0);
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    SCOPED_TRACE(::testing::Message() << "batch " << b);
    ExpectSame(Collate(ds, plan, b, options),
               NaiveCollate(source, names, aligned, plan, b, pad_of));
  }
}

std::vector<int64_t> Shuffled(int64_t n, std::mt19937& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// ---- Tests -----------------------------------------------------------------

TEST(CollateTest, SmallPaddedAndPackedBatchesByHand) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> offsets = {0, 3, 4, 6};  // [1 2 3] [4] [5 6]
  const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 6,
                                         offsets.data(), 3, nullptr)});
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();

  const BatchPlan padded = Plan(lengths, PadToMaxOptions{.batch_size = 2});
  std::vector<Array> out = Collate(ds, padded, 0, {});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<int32_t>(out[0]), (std::vector<int32_t>{1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(out[1].name, "tokens_mask");
  EXPECT_EQ(Values<uint8_t>(out[1]), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(out[2].name, "tokens_lengths");
  EXPECT_EQ(Values<int32_t>(out[2]), (std::vector<int32_t>{3, 1}));
  // A padded row is one segment, as a packed row of one example is.
  EXPECT_EQ(out[3].name, "tokens_segment_ids");
  EXPECT_EQ(Values<int32_t>(out[3]), (std::vector<int32_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(out[4].name, "tokens_positions");
  EXPECT_EQ(Values<int32_t>(out[4]), (std::vector<int32_t>{0, 1, 2, 0, 0, 0}));
  EXPECT_EQ(out[5].name, "example_index");
  EXPECT_EQ(Values<int64_t>(out[5]), (std::vector<int64_t>{0, 1}));
  // What a memory limit counts is what collation allocates, with or without them.
  for (const bool segments : {true, false}) {
    CollateOptions options;
    options.padded_segments = segments;
    const std::vector<Array> arrays = Collate(ds, padded, 0, options);
    EXPECT_EQ(arrays.size(), segments ? 6u : 4u);
    int64_t bytes = 0;
    for (const Array& a : arrays) bytes += a.num_bytes();
    EXPECT_EQ(CollatedBytes(ds, padded.shapes[0], {}, segments), bytes) << segments;
  }
  CollateOptions nine;
  nine.default_pad_value = 9;
  out = Collate(ds, padded, 1, nine);
  EXPECT_EQ(Values<int32_t>(out[0]), (std::vector<int32_t>{5, 6, 9, 9}));
  EXPECT_EQ(Values<int64_t>(Find(out, "example_index")), (std::vector<int64_t>{2, -1}));

  // Best fit: [1 2 3 | 4] and [5 6].
  const BatchPlan packed = Plan(lengths, PackOptions{.row_length = 4, .rows_per_batch = 2});
  ASSERT_EQ(packed.num_batches(), 1);
  out = Collate(ds, packed, 0, {});
  EXPECT_EQ(Values<int32_t>(Find(out, "tokens")), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 0, 0}));
  EXPECT_EQ(Values<int32_t>(Find(out, "tokens_segment_ids")),
            (std::vector<int32_t>{1, 1, 1, 2, 1, 1, 0, 0}));
  EXPECT_EQ(Values<int32_t>(Find(out, "tokens_positions")),
            (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 0}));
  // Lengths 1 + 2 fit a row of 4, 1 + 2 + 3 do not: 2 segments per row.
  EXPECT_EQ(Find(out, "tokens_lengths").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<int32_t>(Find(out, "tokens_lengths")), (std::vector<int32_t>{3, 1, 2, 0}));
  // Row 0's segments start at cells 0 and 3; row 1's unused slot where its tokens end, 2.
  EXPECT_EQ(Values<int32_t>(Find(out, "tokens_segment_starts")),
            (std::vector<int32_t>{0, 3, 0, 2}));
  EXPECT_EQ(Values<int64_t>(Find(out, "example_index")), (std::vector<int64_t>{0, 1, 2, -1}));
}

TEST(CollateTest, PaddedPlansMatchReference) {
  std::mt19937 rng(31);
  const Source source = MakeSource(rng, 40, 12);
  const Dataset ds = source.MakeDataset();
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  const std::vector<int64_t> order = Shuffled(ds.num_examples(), rng);
  const std::vector<PlannerOptions> all = {
      PadToMaxOptions{.batch_size = 4, .pad_to_multiple = 8},
      PadToMaxOptions{.batch_size = 7, .remainder = Remainder::kKeep},
      FixedBucketsOptions{.boundaries = {4, 8, 12}, .batch_size = 3},
      AutoBucketsOptions{.max_shapes = 3, .token_budget = 48},
      AutoBucketsOptions{.max_shapes = 2, .batch_size = 5, .remainder = Remainder::kDrop},
  };
  for (const PlannerOptions& options : all) {
    SCOPED_TRACE(::testing::Message() << "planner " << options.index());
    for (bool shuffled : {false, true}) {
      BatchPlan plan = Plan(lengths, options, shuffled ? PlanOrder(order) : std::nullopt);
      CheckEveryBatch(source, ds, kAll, kAligned, plan, PadOptions(), PadBytes);
      plan.length_column = "labels";  // Aligned with tokens: the same batches.
      CheckEveryBatch(source, ds, kAll, kAligned, plan, PadOptions(), PadBytes);
    }
  }
}

TEST(CollateTest, PackedPlansMatchReference) {
  std::mt19937 rng(32);
  const Source source = MakeSource(rng, 40, 12);
  const Dataset ds = source.MakeDataset({kPackable.begin(), kPackable.end()});
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  const std::vector<int64_t> order = Shuffled(ds.num_examples(), rng);
  for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
    for (Remainder remainder : {Remainder::kPad, Remainder::kKeep}) {
      const PackOptions options{.row_length = 16,
                                .rows_per_batch = 3,
                                .max_segments_per_row = 3,
                                .algorithm = algorithm,
                                .lookahead = 10,
                                .remainder = remainder};
      BatchPlan plan = Plan(lengths, options, order);
      plan.length_column = "tokens";
      CheckEveryBatch(source, ds, kPackable, kAligned, plan, PadOptions(&ds), PadBytes);
      // max_segments_per_row = 0: up to row_length segments per row.
      plan = Plan(lengths, PackOptions{.row_length = 16,
                                       .rows_per_batch = 2,
                                       .algorithm = algorithm,
                                       .remainder = remainder});
      CheckEveryBatch(source, ds, kPackable, kAligned, plan, PadOptions(&ds), PadBytes);
    }
  }
}

// Large batches are filled by several threads split by rows: byte for byte
// what one thread writes, for padded and packed plans.
TEST(CollateTest, ThreadedFillingEqualsOneThread) {
  std::mt19937 rng(33);
  const Source source = MakeSource(rng, 60, 12);
  const Dataset ds = source.MakeDataset({kPackable.begin(), kPackable.end()});
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  const std::vector<PlannerOptions> all = {
      AutoBucketsOptions{.max_shapes = 2, .batch_size = 7},
      PackOptions{.row_length = 16, .rows_per_batch = 5, .max_segments_per_row = 4}};
  for (const PlannerOptions& options : all) {
    BatchPlan plan = Plan(lengths, options);
    plan.length_column = "tokens";
    CollateOptions threaded;
    threaded.num_threads = 3;
    threaded.min_bytes_per_thread = 1;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      const std::vector<Array> one = Collate(ds, plan, b, {});
      const std::vector<Array> many = Collate(ds, plan, b, threaded);
      ASSERT_EQ(one.size(), many.size());
      for (size_t k = 0; k < one.size(); ++k) {
        ASSERT_EQ(one[k].shape, many[k].shape);
        EXPECT_EQ(0,
                  std::memcmp(one[k].data, many[k].data, static_cast<size_t>(one[k].num_bytes())))
            << one[k].name << " of batch " << b;
      }
    }
  }
}

TEST(CollateTest, TruncatesAlignedColumnsOnly) {
  std::mt19937 rng(33);
  const Source source = MakeSource(rng, 30, 12);
  const Dataset ds = source.MakeDataset();
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  const BatchPlan padded = Plan(
      lengths,
      FixedBucketsOptions{.boundaries = {3, 6}, .batch_size = 4, .too_long = TooLong::kTruncate});
  ASSERT_GT(padded.stats.truncated, 0);
  // meta is not aligned: padded to its own longest, never cut.
  CheckEveryBatch(source, ds, kAll, kAligned, padded, PadOptions(), PadBytes);

  const Dataset packable = source.MakeDataset({kPackable.begin(), kPackable.end()});
  const BatchPlan packed = Plan(lengths, PackOptions{.row_length = 8,
                                                     .rows_per_batch = 2,
                                                     .max_segments_per_row = 4,
                                                     .too_long = TooLong::kTruncate});
  ASSERT_GT(packed.stats.truncated, 0);
  CheckEveryBatch(source, packable, kPackable, kAligned, packed, PadOptions(&packable), PadBytes);
}

TEST(CollateTest, PlanByANonAlignedColumn) {
  // Planned by meta: meta pads to the batch's shape, the token group to its
  // longest example in the dataset.
  std::mt19937 rng(34);
  const Source source = MakeSource(rng, 25, 9);
  const Dataset ds = source.MakeDataset();
  BatchPlan plan = Plan(ds.column("meta").Lengths(), PadToMaxOptions{.batch_size = 4});
  plan.length_column = "meta";
  CheckEveryBatch(source, ds, kAll, {"meta"}, plan, PadOptions(), PadBytes);
}

TEST(CollateTest, DefaultPadValueAppliesToEveryColumnWithoutItsOwn) {
  std::mt19937 rng(35);
  const Source source = MakeSource(rng, 20, 10);
  const Dataset ds = source.MakeDataset();
  const BatchPlan plan = Plan(ds.column("tokens").Lengths(), PadToMaxOptions{.batch_size = 3});
  CollateOptions options;
  options.default_pad_value = 2;
  options.pad_values = {{"weights", -0.5}};
  auto pad_of = [](const SourceColumn& c) -> std::vector<uint8_t> {
    switch (c.dtype) {
      case DType::kInt32:
        return Bytes<int32_t>(2);
      case DType::kInt8:
        return Bytes<int8_t>(2);
      case DType::kInt64:
        return Bytes<int64_t>(2);
      case DType::kBFloat16:
        return Bytes<uint16_t>(0x4000);  // bfloat16 2.0.
      default:
        return Bytes<float>(c.name == "weights" ? -0.5f : 2.0f);
    }
  };
  CheckEveryBatch(source, ds, kAll, kAligned, plan, options, pad_of);
}

TEST(CollateTest, ArraysOutliveDatasetAndPlan) {
  std::vector<Array> out;
  {
    const std::vector<int32_t> tokens = {7, 8, 9};
    const std::vector<int64_t> offsets = {0, 1, 3};
    const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 3,
                                           offsets.data(), 2, nullptr)});
    const BatchPlan plan = Plan(ds.column("tokens").Lengths(), PadToMaxOptions{.batch_size = 2});
    out = Collate(ds, plan, 0, {});
  }
  EXPECT_EQ(Values<int32_t>(out[0]), (std::vector<int32_t>{7, 0, 8, 9}));
}

TEST(CollateTest, PackingWithANonAlignedRaggedColumnThrows) {
  std::mt19937 rng(36);
  const Source source = MakeSource(rng, 10, 6);
  const Dataset ds = source.MakeDataset();  // Has meta.
  const BatchPlan plan =
      Plan(ds.column("tokens").Lengths(), PackOptions{.row_length = 8, .rows_per_batch = 2});
  const std::string msg =
      ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, PadOptions()); });
  EXPECT_TRUE(Contains(msg, "'meta'")) << msg;
  EXPECT_TRUE(Contains(msg, "'tokens'")) << msg;
}

TEST(CollateTest, PlanFromOtherLengthsThrows) {
  std::mt19937 rng(37);
  const Source source = MakeSource(rng, 10, 6);
  const Dataset ds = source.MakeDataset();
  std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  int64_t longest = 0;
  for (int64_t i = 0; i < 10; ++i) {
    if (lengths[static_cast<size_t>(i)] > lengths[static_cast<size_t>(longest)]) longest = i;
  }
  ASSERT_GT(lengths[static_cast<size_t>(longest)], 1);
  lengths[static_cast<size_t>(longest)] = 1;
  const std::vector<int64_t> order = {longest};
  const BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 1}, order);
  std::string msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, {}); });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "example " + std::to_string(longest))) << msg;
  EXPECT_TRUE(Contains(msg, "batch 0")) << msg;

  const Dataset packable = source.MakeDataset({kPackable.begin(), kPackable.end()});
  const BatchPlan packed = Plan(lengths, PackOptions{.row_length = 1, .rows_per_batch = 1}, order);
  msg = ThrownMessage<InvalidArgumentError>([&] { Collate(packable, packed, 0, {}); });
  EXPECT_TRUE(Contains(msg, "example " + std::to_string(longest))) << msg;
}

TEST(CollateTest, ExampleOrBatchOutOfRangeThrows) {
  std::mt19937 rng(38);
  const Source source = MakeSource(rng, 10, 6);
  const Dataset ds = source.MakeDataset();
  std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  lengths.push_back(2);  // Example 10: not in the dataset.
  const std::vector<int64_t> order = {3, 10};
  const BatchPlan plan = Plan(lengths, PadToMaxOptions{.batch_size = 2}, order);
  const std::string msg = ThrownMessage<OutOfRangeError>([&] { Collate(ds, plan, 0, {}); });
  EXPECT_TRUE(Contains(msg, "example 10")) << msg;
  EXPECT_TRUE(Contains(msg, "10 examples")) << msg;
  EXPECT_THROW(Collate(ds, plan, 1, {}), OutOfRangeError);
  EXPECT_THROW(Collate(ds, plan, -1, {}), OutOfRangeError);
}

TEST(CollateTest, BatchThatDoesNotMatchItsShapeThrows) {
  // Hand-built plans: more examples in a row than the shape has slots for,
  // or more rows than the shape. Collating them must not write past the
  // arrays (AddressSanitizer would see it) nor silently drop an example.
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int64_t> offsets = {0, 1, 2, 3};
  const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 3,
                                         offsets.data(), 3, nullptr)});
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  const std::vector<int64_t> two = {0, 1};
  const std::vector<int64_t> one = {2};

  PlanBuilder padded(/*packed=*/false);
  padded.BeginBatch({.rows = 2, .length = 4});
  padded.AddRow(two);  // Two examples in one padded row.
  padded.EndBatch();
  const BatchPlan two_in_a_row = std::move(padded).Finish(lengths, 3);
  std::string msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, two_in_a_row, 0, {}); });
  EXPECT_TRUE(Contains(msg, "batch 0")) << msg;
  EXPECT_TRUE(Contains(msg, "row 0")) << msg;

  PlanBuilder packed(/*packed=*/true);
  packed.BeginBatch({.rows = 1, .length = 4, .segments = 1});
  packed.AddRow(two);  // Two segments in a row of one.
  packed.EndBatch();
  const BatchPlan too_many_segments = std::move(packed).Finish(lengths, 3);
  msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, too_many_segments, 0, {}); });
  EXPECT_TRUE(Contains(msg, "row 0")) << msg;

  PlanBuilder extra(/*packed=*/false);
  extra.BeginBatch({.rows = 1, .length = 4});
  extra.AddRow(one);
  extra.AddRow(one);  // A second row in a batch of one row: the builder refuses it.
  msg = ThrownMessage<InvalidArgumentError>([&] { extra.EndBatch(); });
  EXPECT_TRUE(Contains(msg, "batch 0")) << msg;
  // A plan edited after building: its shape has fewer rows than it stores.
  PlanBuilder edited(/*packed=*/false);
  edited.BeginBatch({.rows = 2, .length = 4});
  edited.AddRow(one);
  edited.AddRow(std::vector<int64_t>{0});
  edited.EndBatch();
  BatchPlan too_many_rows = std::move(edited).Finish(lengths, 3);
  too_many_rows.shapes[0].rows = 1;
  msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, too_many_rows, 0, {}); });
  EXPECT_TRUE(Contains(msg, "batch 0")) << msg;
}

TEST(CollateTest, BadPadValueOrLengthColumnThrows) {
  std::mt19937 rng(39);
  const Source source = MakeSource(rng, 10, 6);
  const Dataset ds = source.MakeDataset();
  BatchPlan plan = Plan(ds.column("tokens").Lengths(), PadToMaxOptions{.batch_size = 4});
  CollateOptions options;
  options.pad_values = {{"labels", 1.5}};
  std::string msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, options); });
  EXPECT_TRUE(Contains(msg, "column 'labels'")) << msg;
  options.pad_values = {{"meta", 300}};
  msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, options); });
  EXPECT_TRUE(Contains(msg, "column 'meta'")) << msg;
  plan.length_column = "nope";
  msg = ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, {}); });
  EXPECT_TRUE(Contains(msg, "'nope'")) << msg;
}

TEST(CollateTest, ShapesWhoseBytesOverflowThrowInsteadOfWriting) {
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int64_t> offsets = {0, 1, 2, 3};
  const Dataset ds({RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 3,
                                         offsets.data(), 3, nullptr)});
  const std::vector<int64_t> lengths = ds.column("tokens").Lengths();
  auto plan_of = [&](const BatchShape& shape) {
    PlanBuilder builder(/*packed=*/shape.segments > 0);
    builder.BeginBatch(shape);
    builder.AddRow(std::vector<int64_t>{0});
    builder.EndBatch();
    return std::move(builder).Finish(lengths, 3);
  };
  // 2^40 x 2^22 int32 elements fit an int64 count but not a byte count.
  std::string msg = ThrownMessage<InvalidArgumentError>(
      [&] { Collate(ds, plan_of({.rows = int64_t{1} << 40, .length = int64_t{1} << 22}), 0, {}); });
  EXPECT_TRUE(Contains(msg, "array 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "more than 9223372036854775807 bytes")) << msg;
  // A padded length past the int32 lengths and positions.
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { Collate(ds, plan_of({.rows = 1, .length = int64_t{1} << 31}), 0, {}); });
  EXPECT_TRUE(Contains(msg, "column 'tokens'")) << msg;
  EXPECT_TRUE(Contains(msg, "padded length 2147483648")) << msg;
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { Collate(ds, plan_of({.rows = 1, .length = 4, .segments = int64_t{1} << 31}), 0, {}); });
  EXPECT_TRUE(Contains(msg, "segments per row 2147483648")) << msg;
  // The builder refuses a shape whose element count itself wraps.
  PlanBuilder builder(/*packed=*/false);
  msg = ThrownMessage<InvalidArgumentError>(
      [&] { builder.BeginBatch({.rows = int64_t{1} << 40, .length = int64_t{1} << 40}); });
  EXPECT_TRUE(Contains(msg, "fit int64")) << msg;
  EXPECT_EQ(CollatedBytes(ds, {.rows = int64_t{1} << 40, .length = int64_t{1} << 22}, {}),
            std::numeric_limits<int64_t>::max());
}

TEST(CollateTest, IntegerPadValuesAreExactForEveryWidth) {
  // int64 and uint64 columns padded with values a double cannot hold.
  const std::vector<int64_t> signed_values = {1, 2, 3};
  const std::vector<uint64_t> unsigned_values = {4, 5, 6};
  const std::vector<int64_t> offsets = {0, 2, 3};
  const Dataset ds({RaggedColumn::Ragged("a", DType::kInt64, {}, signed_values.data(), 3,
                                         offsets.data(), 2, nullptr),
                    RaggedColumn::Ragged("b", DType::kUInt64, {}, unsigned_values.data(), 3,
                                         offsets.data(), 2, nullptr)});
  const BatchPlan plan = Plan(ds.column("a").Lengths(), PadToMaxOptions{.batch_size = 3});
  const int64_t above_double = (int64_t{1} << 53) + 1;
  const uint64_t kUInt64Max = std::numeric_limits<uint64_t>::max();
  CollateOptions options;
  options.pad_values = {{"a", above_double}, {"b", kUInt64Max}};
  std::vector<Array> out = Collate(ds, plan, 0, options);
  EXPECT_EQ(Values<int64_t>(Find(out, "a")),
            (std::vector<int64_t>{1, 2, 3, above_double, above_double, above_double}));
  EXPECT_EQ(Values<uint64_t>(Find(out, "b")),
            (std::vector<uint64_t>{4, 5, 6, kUInt64Max, kUInt64Max, kUInt64Max}));
  options.pad_values = {{"a", std::numeric_limits<int64_t>::max()}};
  options.default_pad_value = -1;  // fits a, not b
  const std::string msg =
      ThrownMessage<InvalidArgumentError>([&] { Collate(ds, plan, 0, options); });
  EXPECT_TRUE(Contains(msg, "column 'b'")) << msg;
  EXPECT_TRUE(Contains(msg, "uint64, found -1")) << msg;
}

// A dataset over the source's columns each read as three chunks in place
// (RaggedColumn::Gathered, as a Hugging Face dataset's record batches are),
// in the source's example order: collation must not tell it from one buffer.
struct ChunkedDataset {
  std::vector<std::vector<int64_t>> offsets;  // per chunk, kept alive
  std::optional<Dataset> dataset;
};
ChunkedDataset Chunked(const Source& source, const std::vector<std::string>& names) {
  ChunkedDataset out;
  out.offsets.reserve(3 * names.size());
  std::vector<RaggedColumn> cols;
  for (const std::string& name : names) {
    const SourceColumn& c = source.column(name);
    const auto n = static_cast<int64_t>(c.examples.size());
    std::vector<RaggedColumn::Chunk> chunks;
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t a = n * k / 3, b = n * (k + 1) / 3;
      const int64_t first = c.fixed ? a : c.offsets[static_cast<size_t>(a)];
      const int64_t last = c.fixed ? b : c.offsets[static_cast<size_t>(b)];
      std::span<const int64_t> offsets;
      if (!c.fixed) {
        std::vector<int64_t>& own = out.offsets.emplace_back();
        for (int64_t i = a; i <= b; ++i) own.push_back(c.offsets[static_cast<size_t>(i)] - first);
        offsets = own;
      }
      chunks.push_back({.values = std::span<const uint8_t>(c.flat).subspan(
                            static_cast<size_t>(first * c.row_bytes()),
                            static_cast<size_t>((last - first) * c.row_bytes())),
                        .offsets = offsets,
                        .num_examples = b - a});
    }
    cols.push_back(
        RaggedColumn::Gathered(c.name, c.dtype, c.inner_shape, c.fixed, chunks, {}, nullptr));
  }
  std::vector<std::string> group;
  for (const std::string& name : names) {
    if (kAligned.count(name)) group.push_back(name);
  }
  out.dataset.emplace(std::move(cols), std::vector<std::vector<std::string>>{group});
  return out;
}

TEST(CollateTest, ChunkedColumnsCollateAsOneBuffer) {
  std::mt19937 rng(34);
  const Source source = MakeSource(rng, 30, 12);
  const std::vector<int64_t> lengths = source.MakeDataset().column("tokens").Lengths();
  const std::vector<int64_t> order = Shuffled(static_cast<int64_t>(lengths.size()), rng);
  const ChunkedDataset all = Chunked(source, kAll);
  const ChunkedDataset packable = Chunked(source, kPackable);
  ASSERT_FALSE(all.dataset->column("tokens").contiguous());
  for (const PlannerOptions& options : std::vector<PlannerOptions>{
           AutoBucketsOptions{.max_shapes = 2, .batch_size = 4},
           FixedBucketsOptions{
               .boundaries = {3, 6}, .batch_size = 4, .too_long = TooLong::kTruncate}}) {
    const BatchPlan plan = Plan(lengths, options, order);
    CheckEveryBatch(source, *all.dataset, kAll, kAligned, plan, PadOptions(), PadBytes);
  }
  for (const TooLong too_long : {TooLong::kError, TooLong::kTruncate}) {
    BatchPlan plan = Plan(lengths,
                          PackOptions{.row_length = too_long == TooLong::kError ? 16 : 8,
                                      .rows_per_batch = 2,
                                      .max_segments_per_row = 4,
                                      .too_long = too_long},
                          order);
    plan.length_column = "tokens";
    CheckEveryBatch(source, *packable.dataset, kPackable, kAligned, plan,
                    PadOptions(&*packable.dataset), PadBytes);
  }
}

TEST(CollateTest, ZeroSizedRowsWithNoValuesBuffer) {
  // Found by collate_fuzzer: a column whose rows have an inner dimension of
  // 0 may have no values buffer (null); copying its examples was a memcpy
  // from null (undefined, flagged by UBSan) even though it copies 0 bytes.
  const std::vector<int64_t> offsets = {0, 2, 3};
  const std::vector<int32_t> tokens = {7, 8, 9};
  const Dataset ds(
      {RaggedColumn::Ragged("tokens", DType::kInt32, {}, tokens.data(), 3, offsets.data(), 2,
                            nullptr),
       RaggedColumn::Ragged("empty", DType::kFloat32, {0}, nullptr, 3, offsets.data(), 2, nullptr),
       RaggedColumn::Fixed("none", DType::kInt64, {2, 0}, nullptr, 2, nullptr)},
      {{"tokens", "empty"}});
  for (const PlannerOptions& options : std::vector<PlannerOptions>{
           PadToMaxOptions{.batch_size = 3}, PackOptions{.row_length = 4, .rows_per_batch = 1}}) {
    BatchPlan plan = Plan(ds.column("tokens").Lengths(), options);
    plan.length_column = "tokens";
    const std::vector<Array> out = Collate(ds, plan, 0, {});
    const Array& empty = Find(out, "empty");
    EXPECT_EQ(empty.num_bytes(), 0);
    EXPECT_EQ(empty.shape.back(), 0);
    EXPECT_EQ(Find(out, "none").num_bytes(), 0);
    if (plan.packed) {
      EXPECT_EQ(Values<int32_t>(Find(out, "empty_segment_ids")),
                (std::vector<int32_t>{1, 1, 2, 0}));
    } else {
      EXPECT_EQ(Values<uint8_t>(Find(out, "empty_mask")), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
      EXPECT_EQ(Values<int32_t>(Find(out, "empty_lengths")), (std::vector<int32_t>{2, 1, 0}));
    }
  }
}

}  // namespace
}  // namespace jaxbatch
