#include "jaxbatch/plan/packer.h"

#include <algorithm>
#include <set>
#include <utility>

namespace jaxbatch {
namespace {

// Rows of one window, each a list of examples, in the order they opened.
using WindowRows = std::vector<std::vector<int64_t>>;

// Max segment tree over row room; a full row (no segment slot left) has -1.
class RoomTree {
 public:
  explicit RoomTree(size_t capacity) {
    size_ = 1;
    while (size_ < capacity) size_ *= 2;
    tree_.assign(2 * size_, -1);
  }
  void Set(size_t row, int64_t room) {
    size_t node = row + size_;
    tree_[node] = room;
    for (node /= 2; node >= 1; node /= 2)
      tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
  }
  // Leftmost row with room >= need, or -1.
  int64_t FirstFit(int64_t need) const {
    if (tree_[1] < need) return -1;
    size_t node = 1;
    while (node < size_) node = tree_[2 * node] >= need ? 2 * node : 2 * node + 1;
    return static_cast<int64_t>(node - size_);
  }

 private:
  size_t size_;
  std::vector<int64_t> tree_;
};

void FirstFitWindow(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                    int64_t row_length, int64_t max_segments, WindowRows& rows) {
  RoomTree tree(ids.size());
  std::vector<int64_t> room;
  for (int64_t id : ids) {
    const int64_t length = std::min(lengths[static_cast<size_t>(id)], row_length);
    int64_t row = tree.FirstFit(length);
    if (row < 0) {
      row = static_cast<int64_t>(rows.size());
      rows.emplace_back();
      room.push_back(row_length);
    }
    rows[static_cast<size_t>(row)].push_back(id);
    room[static_cast<size_t>(row)] -= length;
    const bool full = static_cast<int64_t>(rows[static_cast<size_t>(row)].size()) >= max_segments;
    tree.Set(static_cast<size_t>(row), full ? -1 : room[static_cast<size_t>(row)]);
  }
}

void BestFitWindow(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                   int64_t row_length, int64_t max_segments, WindowRows& rows) {
  std::vector<int64_t> sorted(ids.begin(), ids.end());
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  std::set<std::pair<int64_t, int64_t>> open;  // (room, row)
  std::vector<int64_t> room;
  for (int64_t id : sorted) {
    const int64_t length = std::min(lengths[static_cast<size_t>(id)], row_length);
    auto it = open.lower_bound({length, -1});
    int64_t row;
    if (it == open.end()) {
      row = static_cast<int64_t>(rows.size());
      rows.emplace_back();
      room.push_back(row_length);
    } else {
      row = it->second;
      open.erase(it);
    }
    rows[static_cast<size_t>(row)].push_back(id);
    room[static_cast<size_t>(row)] -= length;
    if (static_cast<int64_t>(rows[static_cast<size_t>(row)].size()) < max_segments) {
      open.insert({room[static_cast<size_t>(row)], row});
    }
  }
}

// Open rows of a stream: their examples, their room, and two indexes over
// them — by room (best fit, and the fullest to close) and, for first fit,
// a RoomTree by opening sequence.
class OpenRows {
 public:
  OpenRows(size_t max_rows, int64_t row_length, int64_t max_segments, PackedRows& out)
      : tree_(max_rows), row_length_(row_length), max_segments_(max_segments), out_(out) {}

  // The open row `algorithm` picks for `length`, or -1.
  int64_t Find(int64_t length, PackAlgorithm algorithm) const {
    if (algorithm == PackAlgorithm::kFirstFit) return tree_.FirstFit(length);
    const auto it = by_room_.lower_bound({length, -1});
    return it == by_room_.end() ? -1 : it->second;
  }

  int64_t Open() {
    const auto row = static_cast<int64_t>(examples_.size());
    examples_.emplace_back();
    room_.push_back(row_length_);
    by_room_.insert({row_length_, row});
    tree_.Set(static_cast<size_t>(row), row_length_);
    return row;
  }

  void Add(int64_t row, int64_t id, int64_t length) {
    const auto r = static_cast<size_t>(row);
    by_room_.erase({room_[r], row});
    examples_[r].push_back(id);
    room_[r] -= length;
    if (static_cast<int64_t>(examples_[r].size()) >= max_segments_) {
      Emit(row);
      return;
    }
    by_room_.insert({room_[r], row});
    tree_.Set(r, room_[r]);
  }

  size_t size() const { return by_room_.size(); }

  // Closes the open row with the least room (the earliest opened on ties).
  void CloseFullest() {
    const int64_t row = by_room_.begin()->second;
    by_room_.erase(by_room_.begin());
    Emit(row);
  }

  // Emits every row still open, in opening order.
  void Finish() {
    std::vector<int64_t> rows;
    for (const auto& [room, row] : by_room_) rows.push_back(row);
    std::sort(rows.begin(), rows.end());
    by_room_.clear();
    for (int64_t row : rows) Emit(row);
  }

 private:
  void Emit(int64_t row) {
    const auto r = static_cast<size_t>(row);
    tree_.Set(r, -1);
    out_.example_ids.insert(out_.example_ids.end(), examples_[r].begin(), examples_[r].end());
    out_.row_begin.push_back(static_cast<int64_t>(out_.example_ids.size()));
    std::vector<int64_t>().swap(examples_[r]);
  }

  RoomTree tree_;
  int64_t row_length_;
  int64_t max_segments_;
  PackedRows& out_;
  std::vector<std::vector<int64_t>> examples_;  // by opening sequence
  std::vector<int64_t> room_;
  std::set<std::pair<int64_t, int64_t>> by_room_;  // (room, row) of open rows
};

}  // namespace

PackedRows PackRowsStreaming(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                             int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                             int64_t open_rows) {
  PackedRows packed;
  packed.example_ids.reserve(ids.size());
  OpenRows open(std::max<size_t>(ids.size(), 1), row_length, max_segments, packed);
  for (int64_t id : ids) {
    const int64_t length = std::min(lengths[static_cast<size_t>(id)], row_length);
    int64_t row = open.Find(length, algorithm);
    if (row < 0) {
      if (static_cast<int64_t>(open.size()) >= open_rows) open.CloseFullest();
      row = open.Open();
    }
    open.Add(row, id, length);
  }
  open.Finish();
  return packed;
}

PackedRows PackRows(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                    int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                    int64_t lookahead) {
  PackedRows packed;
  packed.example_ids.reserve(ids.size());
  const size_t window = lookahead > 0 ? static_cast<size_t>(lookahead) : ids.size();
  WindowRows rows;
  for (size_t start = 0; start < ids.size(); start += window) {
    const std::span<const int64_t> chunk = ids.subspan(start, std::min(window, ids.size() - start));
    rows.clear();
    if (algorithm == PackAlgorithm::kFirstFit) {
      FirstFitWindow(lengths, chunk, row_length, max_segments, rows);
    } else {
      BestFitWindow(lengths, chunk, row_length, max_segments, rows);
    }
    for (const std::vector<int64_t>& row : rows) {
      packed.example_ids.insert(packed.example_ids.end(), row.begin(), row.end());
      packed.row_begin.push_back(static_cast<int64_t>(packed.example_ids.size()));
    }
  }
  return packed;
}

PackedRows PackRowsWith(std::span<const int64_t> lengths, std::span<const int64_t> ids,
                        int64_t row_length, int64_t max_segments, PackAlgorithm algorithm,
                        std::optional<int64_t> lookahead, std::optional<int64_t> open_rows) {
  if (open_rows) {
    return PackRowsStreaming(lengths, ids, row_length, max_segments, algorithm, *open_rows);
  }
  return PackRows(lengths, ids, row_length, max_segments, algorithm, lookahead.value_or(0));
}

}  // namespace jaxbatch
