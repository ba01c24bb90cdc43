#include "jaxbatch/plan/feature_packer.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

namespace jaxbatch {
namespace {

// The rows being filled: their examples, each feature's room, and two
// indexes over the rows still open — a segment tree of each feature's
// largest room by opening sequence (first fit) and a set by total room
// (best fit, and the fullest to close).
class FeatureRows {
 public:
  FeatureRows(const FeatureLengths& features, size_t max_rows, int64_t max_segments, bool emit_full,
              PackedRows& out)
      : features_(features),
        num_features_(static_cast<size_t>(features.num_features())),
        max_segments_(max_segments),
        emit_full_(emit_full),
        out_(out) {
    size_ = 1;
    while (size_ < max_rows) size_ *= 2;
    tree_.assign(2 * size_ * num_features_, -1);
  }

  // The open row `algorithm` picks for `need` (one length per feature), or -1.
  int64_t Find(std::span<const int64_t> need, PackAlgorithm algorithm) const {
    if (algorithm == PackAlgorithm::kFirstFit) return Leftmost(1, need);
    const int64_t total = std::accumulate(need.begin(), need.end(), int64_t{0});
    for (auto it = by_total_.lower_bound({total, -1}); it != by_total_.end(); ++it) {
      if (Fits(RoomOf(it->second), need)) return it->second;
    }
    return -1;
  }

  int64_t Open() {
    const auto row = static_cast<int64_t>(examples_.size());
    examples_.emplace_back();
    room_.insert(room_.end(), features_.capacities.begin(), features_.capacities.end());
    total_.push_back(
        std::accumulate(features_.capacities.begin(), features_.capacities.end(), int64_t{0}));
    emitted_.push_back(false);
    Index(row);
    return row;
  }

  void Add(int64_t row, int64_t id, std::span<const int64_t> need) {
    const auto r = static_cast<size_t>(row);
    by_total_.erase({total_[r], row});
    examples_[r].push_back(id);
    for (size_t f = 0; f < num_features_; ++f) {
      room_[r * num_features_ + f] -= need[f];
      total_[r] -= need[f];
    }
    if (static_cast<int64_t>(examples_[r].size()) >= max_segments_) {
      SetTree(r, nullptr);
      if (emit_full_) Emit(row);
      return;
    }
    Index(row);
  }

  size_t open() const { return by_total_.size(); }

  // Closes the open row with the least room left (the earliest on ties).
  void CloseFullest() {
    const int64_t row = by_total_.begin()->second;
    by_total_.erase(by_total_.begin());
    SetTree(static_cast<size_t>(row), nullptr);
    Emit(row);
  }

  // Emits every row not yet emitted, in opening order.
  void Finish() {
    for (size_t r = 0; r < examples_.size(); ++r) {
      if (!emitted_[r]) Emit(static_cast<int64_t>(r));
    }
  }

 private:
  std::span<const int64_t> RoomOf(int64_t row) const {
    return std::span<const int64_t>(room_).subspan(static_cast<size_t>(row) * num_features_,
                                                   num_features_);
  }
  static bool Fits(std::span<const int64_t> room, std::span<const int64_t> need) {
    for (size_t f = 0; f < need.size(); ++f) {
      if (room[f] < need[f]) return false;
    }
    return true;
  }
  void Index(int64_t row) {
    by_total_.insert({total_[static_cast<size_t>(row)], row});
    SetTree(static_cast<size_t>(row), room_.data() + static_cast<size_t>(row) * num_features_);
  }
  // Sets a leaf's rooms (nullptr: closed, -1 in every feature) and its
  // ancestors' maxima.
  void SetTree(size_t row, const int64_t* room) {
    size_t node = row + size_;
    for (size_t f = 0; f < num_features_; ++f)
      tree_[node * num_features_ + f] = room ? room[f] : -1;
    for (node /= 2; node >= 1; node /= 2) {
      for (size_t f = 0; f < num_features_; ++f) {
        tree_[node * num_features_ + f] = std::max(tree_[2 * node * num_features_ + f],
                                                   tree_[(2 * node + 1) * num_features_ + f]);
      }
    }
  }
  // The leftmost row under `node` where every feature fits, or -1. A node's
  // maxima may come from different rows, so a subtree that passes may still
  // hold no fit: the search backs out of it.
  int64_t Leftmost(size_t node, std::span<const int64_t> need) const {
    if (!Fits(std::span<const int64_t>(tree_).subspan(node * num_features_, num_features_), need)) {
      return -1;
    }
    if (node >= size_) return static_cast<int64_t>(node - size_);
    const int64_t left = Leftmost(2 * node, need);
    return left >= 0 ? left : Leftmost(2 * node + 1, need);
  }
  void Emit(int64_t row) {
    const auto r = static_cast<size_t>(row);
    emitted_[r] = true;
    out_.example_ids.insert(out_.example_ids.end(), examples_[r].begin(), examples_[r].end());
    out_.row_begin.push_back(static_cast<int64_t>(out_.example_ids.size()));
    std::vector<int64_t>().swap(examples_[r]);
  }

  const FeatureLengths& features_;
  size_t num_features_;
  int64_t max_segments_;
  bool emit_full_;  // streaming: a full row is emitted at once
  PackedRows& out_;
  size_t size_;
  std::vector<int64_t> tree_;  // node-major, num_features_ maxima a node
  std::vector<std::vector<int64_t>> examples_;
  std::vector<int64_t> room_;  // row-major
  std::vector<int64_t> total_;
  std::vector<bool> emitted_;
  std::set<std::pair<int64_t, int64_t>> by_total_;  // (total room, row) of open rows
};

// Places `ids` in order into `rows`, opening a row when none fits; with
// `open_rows` > 0 the fullest closes first when that many are open.
void Place(const FeatureLengths& features, std::span<const int64_t> ids, PackAlgorithm algorithm,
           int64_t open_rows, FeatureRows& rows) {
  std::vector<int64_t> need(static_cast<size_t>(features.num_features()));
  for (int64_t id : ids) {
    for (int64_t f = 0; f < features.num_features(); ++f) {
      need[static_cast<size_t>(f)] = features.at(f, id);
    }
    int64_t row = rows.Find(need, algorithm);
    if (row < 0) {
      if (open_rows > 0 && static_cast<int64_t>(rows.open()) >= open_rows) rows.CloseFullest();
      row = rows.Open();
    }
    rows.Add(row, id, need);
  }
  rows.Finish();
}

int64_t TotalLength(const FeatureLengths& features, int64_t id) {
  int64_t total = 0;
  for (int64_t f = 0; f < features.num_features(); ++f) total += features.at(f, id);
  return total;
}

}  // namespace

PackedRows PackFeatureRows(const FeatureLengths& features, std::span<const int64_t> ids,
                           int64_t max_segments, PackAlgorithm algorithm, int64_t lookahead,
                           int64_t open_rows) {
  PackedRows packed;
  packed.example_ids.reserve(ids.size());
  if (open_rows > 0) {
    FeatureRows rows(features, std::max<size_t>(ids.size(), 1), max_segments, true, packed);
    Place(features, ids, algorithm, open_rows, rows);
    return packed;
  }
  const size_t window = lookahead > 0 ? static_cast<size_t>(lookahead) : ids.size();
  for (size_t start = 0; start < ids.size(); start += window) {
    std::vector<int64_t> chunk(
        ids.begin() + static_cast<std::ptrdiff_t>(start),
        ids.begin() + static_cast<std::ptrdiff_t>(std::min(start + window, ids.size())));
    if (algorithm == PackAlgorithm::kBestFit) {
      std::stable_sort(chunk.begin(), chunk.end(), [&](int64_t a, int64_t b) {
        return TotalLength(features, a) > TotalLength(features, b);
      });
    }
    FeatureRows rows(features, chunk.size(), max_segments, false, packed);
    Place(features, chunk, algorithm, 0, rows);
  }
  return packed;
}

}  // namespace jaxbatch
