// Tests for plan/packer: first fit and best-fit decreasing against naive
// O(n^2) references that scan every open row, plus the invariants any
// packing must keep.
#include "jaxbatch/plan/packer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace jaxbatch {
namespace {

struct NaiveRow {
  std::vector<int64_t> ids;
  int64_t room = 0;
};

PackedRows Flatten(const std::vector<NaiveRow>& rows) {
  PackedRows packed;
  for (const NaiveRow& row : rows) {
    packed.example_ids.insert(packed.example_ids.end(), row.ids.begin(), row.ids.end());
    packed.row_begin.push_back(static_cast<int64_t>(packed.example_ids.size()));
  }
  return packed;
}

// Splits `ids` into lookahead windows (0 = one window).
std::vector<std::vector<int64_t>> Windows(const std::vector<int64_t>& ids, int64_t lookahead) {
  std::vector<std::vector<int64_t>> windows;
  const size_t size = lookahead > 0 ? static_cast<size_t>(lookahead) : ids.size();
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k % size == 0) windows.emplace_back();
    windows.back().push_back(ids[k]);
  }
  return windows;
}

PackedRows NaiveFirstFit(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                         int64_t row_length, int64_t max_segments, int64_t lookahead) {
  std::vector<NaiveRow> all;
  for (const std::vector<int64_t>& window : Windows(ids, lookahead)) {
    std::vector<NaiveRow> rows;
    for (int64_t id : window) {
      const int64_t need = lengths[static_cast<size_t>(id)];
      size_t r = 0;
      while (r < rows.size() &&
             !(rows[r].room >= need && static_cast<int64_t>(rows[r].ids.size()) < max_segments)) {
        ++r;
      }
      if (r == rows.size()) rows.push_back({{}, row_length});
      rows[r].ids.push_back(id);
      rows[r].room -= need;
    }
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return Flatten(all);
}

PackedRows NaiveBestFit(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                        int64_t row_length, int64_t max_segments, int64_t lookahead) {
  std::vector<NaiveRow> all;
  for (std::vector<int64_t> window : Windows(ids, lookahead)) {
    std::stable_sort(window.begin(), window.end(), [&](int64_t a, int64_t b) {
      return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
    });
    std::vector<NaiveRow> rows;
    for (int64_t id : window) {
      const int64_t need = lengths[static_cast<size_t>(id)];
      size_t best = rows.size();
      for (size_t r = 0; r < rows.size(); ++r) {
        const bool open = static_cast<int64_t>(rows[r].ids.size()) < max_segments;
        if (open && rows[r].room >= need &&
            (best == rows.size() || rows[r].room < rows[best].room)) {
          best = r;  // Strictly less room: ties keep the smaller row index.
        }
      }
      if (best == rows.size()) rows.push_back({{}, row_length});
      rows[best].ids.push_back(id);
      rows[best].room -= need;
    }
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return Flatten(all);
}

// Invariants of any packing of `ids`.
void CheckInvariants(const PackedRows& packed, const std::vector<int64_t>& lengths,
                     const std::vector<int64_t>& ids, int64_t row_length, int64_t max_segments,
                     int64_t lookahead) {
  ASSERT_FALSE(packed.row_begin.empty());
  EXPECT_EQ(packed.row_begin.front(), 0);
  EXPECT_EQ(packed.row_begin.back(), static_cast<int64_t>(packed.example_ids.size()));
  // Every id exactly once.
  std::vector<int64_t> got = packed.example_ids, want = ids;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  // Window of each id: its position in `ids` / lookahead.
  std::map<int64_t, size_t> window;
  for (size_t k = 0; k < ids.size(); ++k) window[ids[k]] = lookahead > 0 ? k / lookahead : 0;
  for (int64_t r = 0; r < packed.num_rows(); ++r) {
    const int64_t begin = packed.row_begin[static_cast<size_t>(r)];
    const int64_t end = packed.row_begin[static_cast<size_t>(r) + 1];
    EXPECT_GT(end, begin) << "row " << r << " is empty";
    EXPECT_LE(end - begin, max_segments) << "row " << r;
    int64_t used = 0;
    for (int64_t k = begin; k < end; ++k) {
      const int64_t id = packed.example_ids[static_cast<size_t>(k)];
      used += lengths[static_cast<size_t>(id)];
      EXPECT_EQ(window[id], window[packed.example_ids[static_cast<size_t>(begin)]])
          << "row " << r << " mixes windows";
    }
    EXPECT_LE(used, row_length) << "row " << r;
  }
}

TEST(PackRowsTest, FirstFitAndBestFitOnAHandCase) {
  // Lengths 4, 7, 3, 6 into rows of 10.
  const std::vector<int64_t> lengths = {4, 7, 3, 6};
  const std::vector<int64_t> ids = {0, 1, 2, 3};
  PackedRows ff = PackRows(lengths, ids, 10, 10, PackAlgorithm::kFirstFit, 0);
  EXPECT_EQ(ff.row_begin, (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(ff.example_ids, (std::vector<int64_t>{0, 2, 1, 3}));
  // Best fit decreasing: 7 | 6 | 4 -> row with 4 left | 3 -> row with 3 left.
  PackedRows bf = PackRows(lengths, ids, 10, 10, PackAlgorithm::kBestFit, 0);
  EXPECT_EQ(bf.num_rows(), 2);
  EXPECT_EQ(bf.row_begin, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(bf.example_ids, (std::vector<int64_t>{1, 2, 3, 0}));
}

TEST(PackRowsTest, EmptyInputHasNoRows) {
  const std::vector<int64_t> lengths = {3};
  for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
    const PackedRows packed = PackRows(lengths, {}, 8, 2, algorithm, 0);
    EXPECT_EQ(packed.num_rows(), 0);
    EXPECT_EQ(packed.row_begin, (std::vector<int64_t>{0}));
    EXPECT_TRUE(packed.example_ids.empty());
  }
}

TEST(PackRowsTest, LookaheadOneGivesOneRowPerExample) {
  const std::vector<int64_t> lengths = {5, 5, 5, 5};
  const std::vector<int64_t> ids = {3, 2, 1, 0};
  for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
    PackedRows packed = PackRows(lengths, ids, 10, 10, algorithm, 1);
    EXPECT_EQ(packed.num_rows(), 4);
    EXPECT_EQ(packed.example_ids, ids);
    packed = PackRows(lengths, ids, 10, 10, algorithm, 2);
    EXPECT_EQ(packed.row_begin, (std::vector<int64_t>{0, 2, 4}));
    EXPECT_EQ(packed.example_ids, ids);
  }
}

TEST(PackRowsTest, MaxSegmentsClosesRows) {
  const std::vector<int64_t> lengths(7, 1);
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6};
  for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
    const PackedRows packed = PackRows(lengths, ids, 10, 3, algorithm, 0);
    EXPECT_EQ(packed.row_begin, (std::vector<int64_t>{0, 3, 6, 7})) << static_cast<int>(algorithm);
  }
}

TEST(PackRowsTest, EmptyExamplesTakeASegmentButNoRoom) {
  const std::vector<int64_t> lengths = {4, 0, 0, 4};
  const std::vector<int64_t> ids = {0, 1, 2, 3};
  const PackedRows packed = PackRows(lengths, ids, 4, 2, PackAlgorithm::kFirstFit, 0);
  // 4 fills row 0 but it has one segment left for an empty example.
  EXPECT_EQ(packed.row_begin, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(packed.example_ids, (std::vector<int64_t>{0, 1, 2, 3}));
}

struct Case {
  std::vector<int64_t> lengths;
  std::vector<int64_t> ids;
  int64_t row_length;
  int64_t max_segments;
  int64_t lookahead;
};

Case RandomCase(std::mt19937& rng) {
  Case c;
  c.row_length = std::uniform_int_distribution<int64_t>(1, 32)(rng);
  const int n = std::uniform_int_distribution<int>(0, 80)(rng);
  for (int i = 0; i < n; ++i) {
    // Mostly short examples, some at the row length, a few empty.
    const int64_t hi = rng() % 4 == 0 ? c.row_length : std::max<int64_t>(1, c.row_length / 3);
    c.lengths.push_back(std::uniform_int_distribution<int64_t>(0, hi)(rng));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rng() % 5 != 0) c.ids.push_back(i);  // A subset ...
  }
  std::shuffle(c.ids.begin(), c.ids.end(), rng);  // ... in any order.
  c.max_segments =
      rng() % 3 == 0 ? c.row_length : std::uniform_int_distribution<int64_t>(1, 5)(rng);
  const int64_t lookaheads[] = {0, 1, 2, 3, 7, 16, n + 1};
  c.lookahead = lookaheads[rng() % 7];
  return c;
}

TEST(PackRowsTest, FirstFitEqualsNaiveFirstFit) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const Case c = RandomCase(rng);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " row_length=" << c.row_length
                 << " max_segments=" << c.max_segments << " lookahead=" << c.lookahead);
    const PackedRows got = PackRows(c.lengths, c.ids, c.row_length, c.max_segments,
                                    PackAlgorithm::kFirstFit, c.lookahead);
    CheckInvariants(got, c.lengths, c.ids, c.row_length, c.max_segments, c.lookahead);
    const PackedRows want =
        NaiveFirstFit(c.lengths, c.ids, c.row_length, c.max_segments, c.lookahead);
    ASSERT_EQ(got.row_begin, want.row_begin);
    ASSERT_EQ(got.example_ids, want.example_ids);
  }
}

TEST(PackRowsTest, BestFitEqualsNaiveBestFitDecreasing) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 500; ++trial) {
    const Case c = RandomCase(rng);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " row_length=" << c.row_length
                 << " max_segments=" << c.max_segments << " lookahead=" << c.lookahead);
    const PackedRows got = PackRows(c.lengths, c.ids, c.row_length, c.max_segments,
                                    PackAlgorithm::kBestFit, c.lookahead);
    CheckInvariants(got, c.lengths, c.ids, c.row_length, c.max_segments, c.lookahead);
    const PackedRows want =
        NaiveBestFit(c.lengths, c.ids, c.row_length, c.max_segments, c.lookahead);
    ASSERT_EQ(got.row_begin, want.row_begin);
    ASSERT_EQ(got.example_ids, want.example_ids);
  }
}

TEST(PackRowsTest, BestFitDecreasingNeedsNoMoreRowsThanFirstFitInTotal) {
  // Packing longest first wastes less than packing in arrival order. That
  // holds over many cases, not in every one, so compare seeded totals.
  std::mt19937 rng(9);
  int64_t first_fit_rows = 0, best_fit_rows = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Case c = RandomCase(rng);
    c.lookahead = 0;
    first_fit_rows +=
        PackRows(c.lengths, c.ids, c.row_length, c.max_segments, PackAlgorithm::kFirstFit, 0)
            .num_rows();
    best_fit_rows +=
        PackRows(c.lengths, c.ids, c.row_length, c.max_segments, PackAlgorithm::kBestFit, 0)
            .num_rows();
  }
  EXPECT_LE(best_fit_rows, first_fit_rows);
}

// Streaming with at most `open_rows` open rows, by scanning them: open rows
// in opening order, each with its examples and room.
PackedRows NaiveStreaming(const std::vector<int64_t>& lengths, const std::vector<int64_t>& ids,
                          int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                          int64_t open_rows) {
  std::vector<NaiveRow> open, closed;
  for (int64_t id : ids) {
    const int64_t length = lengths[static_cast<size_t>(id)];
    int64_t pick = -1;
    for (size_t r = 0; r < open.size(); ++r) {
      if (open[r].room < length) continue;
      if (algorithm == PackAlgorithm::kFirstFit) {
        pick = static_cast<int64_t>(r);
        break;
      }
      if (pick < 0 || open[r].room < open[static_cast<size_t>(pick)].room) {
        pick = static_cast<int64_t>(r);
      }
    }
    if (pick < 0) {
      if (static_cast<int64_t>(open.size()) >= open_rows) {
        size_t fullest = 0;  // least room, earliest opened on ties
        for (size_t r = 1; r < open.size(); ++r) {
          if (open[r].room < open[fullest].room) fullest = r;
        }
        closed.push_back(open[fullest]);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(fullest));
      }
      open.push_back({{}, row_length});
      pick = static_cast<int64_t>(open.size()) - 1;
    }
    NaiveRow& row = open[static_cast<size_t>(pick)];
    row.ids.push_back(id);
    row.room -= length;
    if (static_cast<int64_t>(row.ids.size()) >= max_segments) {
      closed.push_back(row);
      open.erase(open.begin() + pick);
    }
  }
  closed.insert(closed.end(), open.begin(), open.end());
  return Flatten(closed);
}

TEST(PackRowsStreamingTest, EqualsNaiveStreamingForBothAlgorithms) {
  std::mt19937 rng(10);
  for (int trial = 0; trial < 500; ++trial) {
    const Case c = RandomCase(rng);
    const int64_t open_rows = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    for (PackAlgorithm algorithm : {PackAlgorithm::kFirstFit, PackAlgorithm::kBestFit}) {
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " row_length=" << c.row_length
                   << " max_segments=" << c.max_segments << " open_rows=" << open_rows
                   << " algorithm " << static_cast<int>(algorithm));
      const PackedRows got =
          PackRowsStreaming(c.lengths, c.ids, c.row_length, c.max_segments, algorithm, open_rows);
      CheckInvariants(got, c.lengths, c.ids, c.row_length, c.max_segments, 0);
      const PackedRows want =
          NaiveStreaming(c.lengths, c.ids, c.row_length, c.max_segments, algorithm, open_rows);
      ASSERT_EQ(got.row_begin, want.row_begin);
      ASSERT_EQ(got.example_ids, want.example_ids);
    }
  }
}

TEST(PackRowsStreamingTest, TheFullestRowClosesWhenNothingFits) {
  // Rows of 10, one open row at most: 6 | 7 closes [6] | 3 joins [7] | 5
  // closes [7, 3] | 4 joins [5].
  const std::vector<int64_t> lengths = {6, 7, 3, 5, 4};
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4};
  PackedRows one = PackRowsStreaming(lengths, ids, 10, 10, PackAlgorithm::kFirstFit, 1);
  EXPECT_EQ(one.row_begin, (std::vector<int64_t>{0, 1, 3, 5}));
  EXPECT_EQ(one.example_ids, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Two open rows: [6] [7]; 3 -> first fit [6, 3], best fit [7, 3]; then 5
  // fits none: the fullest closes.
  PackedRows ff = PackRowsStreaming(lengths, ids, 10, 10, PackAlgorithm::kFirstFit, 2);
  EXPECT_EQ(ff.example_ids, (std::vector<int64_t>{0, 2, 1, 3, 4}));
  EXPECT_EQ(ff.row_begin, (std::vector<int64_t>{0, 2, 3, 5}));
  PackedRows bf = PackRowsStreaming(lengths, ids, 10, 10, PackAlgorithm::kBestFit, 2);
  EXPECT_EQ(bf.example_ids, (std::vector<int64_t>{1, 2, 0, 4, 3}));
  EXPECT_EQ(bf.row_begin, (std::vector<int64_t>{0, 2, 4, 5}));
}

}  // namespace
}  // namespace jaxbatch
