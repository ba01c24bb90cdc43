#include "jaxbatch/load/mixture_schedule.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "jaxbatch/base/checked.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/base/wide.h"
#include "jaxbatch/load/index_shuffle.h"

namespace jaxbatch {
namespace {

constexpr uint64_t kSourceSalt = 0x736f75726365ull;  // "source"
constexpr uint64_t kBlockSalt = 0x626c6f636bull;     // "block"

// A token clock past int64 would wrap and scramble the schedule: refused.
int64_t Counted(int64_t clock, int64_t tokens, const std::string& name) {
  const std::optional<int64_t> sum = CheckedAdd(clock, tokens);
  if (!sum) {
    throw Error(StrCat("MixtureSchedule: source '", name, "' drew more than 2^63 tokens"));
  }
  return *sum;
}

std::string SourceName(std::span<const std::string> names, size_t i) {
  return i < names.size() ? StrCat("'", names[i], "'") : StrCat(i);
}

}  // namespace

const char* MixtureUnitName(MixtureUnit unit) {
  return unit == MixtureUnit::kTokens ? "tokens" : "examples";
}

MixtureUnit ParseMixtureUnit(std::string_view name) {
  for (const MixtureUnit unit : {MixtureUnit::kExamples, MixtureUnit::kTokens}) {
    if (name == MixtureUnitName(unit)) return unit;
  }
  throw InvalidArgumentError(
      StrCat("Dataset.mix: unit must be 'tokens' or 'examples', found '", name, "'"));
}

const char* ExhaustionName(Exhaustion exhaustion) {
  switch (exhaustion) {
    case Exhaustion::kRestart:
      return "restart";
    case Exhaustion::kStop:
      return "stop";
    case Exhaustion::kDrop:
      return "drop";
  }
  return "?";
}

Exhaustion ParseExhaustion(std::string_view name) {
  for (const Exhaustion e : {Exhaustion::kRestart, Exhaustion::kStop, Exhaustion::kDrop}) {
    if (name == ExhaustionName(e)) return e;
  }
  throw InvalidArgumentError(
      StrCat("Dataset.mix: exhaustion must be 'restart', 'stop' or 'drop', found '", name, "'"));
}

std::vector<int64_t> WeightsFromShares(std::span<const double> shares,
                                       std::span<const std::string> names) {
  double smallest = 0, largest = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    const double share = shares[i];
    if (!std::isfinite(share) || share < 0) {
      throw InvalidArgumentError(StrCat("Dataset.mix: the weight of source ", SourceName(names, i),
                                        " must be a finite number >= 0, ", "found ", share));
    }
    if (share > 0) {
      smallest = smallest == 0 ? share : std::min(smallest, share);
      largest = std::max(largest, share);
    }
  }
  if (largest == 0) {
    throw InvalidArgumentError("Dataset.mix: expected a positive weight, found none");
  }
  if (largest / smallest > kMaxWeightRatio) {
    throw InvalidArgumentError(StrCat("Dataset.mix: the weights' largest to smallest positive ",
                                      "ratio is ", largest / smallest, ", above ", kMaxWeightRatio,
                                      "; give a weight that small 0 instead"));
  }
  const double scale = static_cast<double>(kWeightScale) / smallest;
  std::vector<int64_t> weights;
  weights.reserve(shares.size());
  for (const double share : shares) weights.push_back(static_cast<int64_t>(share * scale));
  return weights;
}

MixtureSchedule::MixtureSchedule(std::vector<int64_t> sizes,
                                 std::vector<std::span<const int64_t>> tokens, MixtureUnit unit,
                                 Exhaustion exhaustion, SourceOrder order,
                                 std::vector<std::string> names)
    : sizes_(std::move(sizes)),
      tokens_(std::move(tokens)),
      unit_(unit),
      exhaustion_(exhaustion),
      order_(order),
      names_(std::move(names)) {
  if (sizes_.empty()) throw InvalidArgumentError("Dataset.mix: expected a source, found none");
  if (names_.size() != sizes_.size()) {
    throw InvalidArgumentError(
        StrCat("MixtureSchedule: ", sizes_.size(), " sources but ", names_.size(), " names"));
  }
  if (order_.block_size < 1) {
    throw InvalidArgumentError(
        StrCat("MixtureSchedule: block_size must be >= 1, found ", order_.block_size));
  }
  for (size_t s = 0; s < names_.size(); ++s) {
    if (names_[s].empty()) throw InvalidArgumentError("Dataset.mix: a source has an empty name");
    for (size_t t = 0; t < s; ++t) {
      if (names_[t] == names_[s]) {
        throw InvalidArgumentError(StrCat("Dataset.mix: source '", names_[s], "' appears twice"));
      }
    }
    if (sizes_[s] < 0) {
      throw InvalidArgumentError(
          StrCat("MixtureSchedule: source '", names_[s], "' has ", sizes_[s], " examples"));
    }
    if (unit_ == MixtureUnit::kTokens &&
        (s >= tokens_.size() || static_cast<int64_t>(tokens_[s].size()) != sizes_[s])) {
      throw InvalidArgumentError(StrCat("MixtureSchedule: source '", names_[s],
                                        "' needs one token count per example for unit='tokens'"));
    }
    const uint64_t name = Hash64(names_[s].data(), names_[s].size());
    keys_.push_back(Mix64(order_.seed ^ Mix64(name ^ kSourceSalt)));
  }
}

bool MixtureSchedule::Eligible(const MixtureCursor& cursor, int64_t source) const {
  const auto s = static_cast<size_t>(source);
  return cursor.weights[s] > 0 && !cursor.sources[s].exhausted;
}

MixtureCursor MixtureSchedule::Fresh() const {
  MixtureCursor cursor;
  cursor.sources.resize(sizes_.size());
  if (exhaustion_ == Exhaustion::kDrop) {
    for (size_t s = 0; s < sizes_.size(); ++s) cursor.sources[s].exhausted = sizes_[s] == 0;
  }
  return cursor;
}

MixtureCursor MixtureSchedule::Start(std::vector<int64_t> weights) const {
  MixtureCursor cursor = Fresh();
  SetWeights(cursor, std::move(weights));
  return cursor;
}

MixtureCursor MixtureSchedule::Resume(int64_t position, std::span<const std::string> names,
                                      std::span<const MixtureSourceCursor> sources,
                                      std::vector<int64_t> weights) const {
  MixtureCursor cursor = Fresh();
  cursor.position = position;
  for (size_t s = 0; s < names_.size(); ++s) {
    for (size_t t = 0; t < names.size() && t < sources.size(); ++t) {
      if (names[t] != names_[s]) continue;
      cursor.sources[s].draws = sources[t].draws;
      cursor.sources[s].exhausted = cursor.sources[s].exhausted || sources[t].exhausted;
    }
  }
  SetWeights(cursor, std::move(weights));
  return cursor;
}

void MixtureSchedule::SetWeights(MixtureCursor& cursor, std::vector<int64_t> weights) const {
  if (weights.size() != sizes_.size()) {
    throw InvalidArgumentError(
        StrCat("MixtureSchedule: expected ", sizes_.size(), " weights, found ", weights.size()));
  }
  bool any = false;
  for (size_t s = 0; s < weights.size(); ++s) {
    if (weights[s] < 0) {
      throw InvalidArgumentError(
          StrCat("Dataset.mix: source '", names_[s], "' has a negative weight ", weights[s]));
    }
    if (weights[s] > 0 && sizes_[s] == 0 && exhaustion_ == Exhaustion::kRestart) {
      throw InvalidArgumentError(StrCat("Dataset.mix: source '", names_[s],
                                        "' has no examples but a positive weight; with ",
                                        "exhaustion='restart' it could never be drawn"));
    }
    any = any || (weights[s] > 0 && !cursor.sources[s].exhausted);
  }
  if (!any && !cursor.ended && exhaustion_ == Exhaustion::kDrop) {
    cursor.ended = true;  // every source these weights draw from has run out
  } else if (!any && !cursor.ended) {
    throw InvalidArgumentError(
        "Dataset.mix: expected a positive weight for a source that can still be drawn, "
        "found none");
  }
  if (weights != cursor.weights) {
    for (MixtureSourceCursor& source : cursor.sources) source.tokens = 0;
    cursor.weights = std::move(weights);
  }
}

int64_t MixtureSchedule::ExampleOf(int64_t source, int64_t draw) const {
  const auto s = static_cast<size_t>(source);
  const auto n = static_cast<uint64_t>(sizes_[s]);
  const uint64_t epoch = static_cast<uint64_t>(draw) / n;
  const uint64_t j = static_cast<uint64_t>(draw) % n;
  const uint64_t key = Mix64(keys_[s] ^ Mix64(epoch));
  switch (order_.shuffle) {
    case ShuffleMode::kNone:
      return static_cast<int64_t>(j);
    case ShuffleMode::kGlobal:
      return static_cast<int64_t>(IndexShuffle(n, key)(j));
    case ShuffleMode::kBlock:
      break;
  }
  // Full blocks in random order, each shuffled within; the short tail last.
  const auto block = static_cast<uint64_t>(order_.block_size);
  const uint64_t full = n / block;
  if (j < full * block) {
    const uint64_t b = IndexShuffle(full, key ^ kBlockSalt)(j / block);
    return static_cast<int64_t>(b * block + IndexShuffle(block, key ^ Mix64(b))(j % block));
  }
  const uint64_t tail = n - full * block;
  return static_cast<int64_t>(full * block +
                              IndexShuffle(tail, key ^ Mix64(full))(j - full * block));
}

void MixtureSchedule::Draw(MixtureCursor& cursor, int64_t count,
                           std::vector<MixtureDraw>* out) const {
  if (unit_ == MixtureUnit::kTokens) return DrawTokens(cursor, count, out);
  DrawExamples(cursor, count, out);
}

void MixtureSchedule::DrawExamples(MixtureCursor& cursor, int64_t count,
                                   std::vector<MixtureDraw>* out) const {
  const int64_t end = cursor.position + count;
  while (!cursor.ended && cursor.position < end) {
    // Grain's _dataset_and_key_of_next_element: the source whose count
    // among the first k + 1 positions exceeds its count among the first k.
    Uint128 remaining = 0;
    for (size_t s = 0; s < sizes_.size(); ++s) {
      if (Eligible(cursor, static_cast<int64_t>(s))) remaining += cursor.weights[s];
    }
    if (remaining == 0) {
      cursor.ended = true;
      return;
    }
    Uint128 k = static_cast<Uint128>(cursor.position), k1 = k + 1;
    size_t chosen = 0;
    for (size_t s = 0; s < sizes_.size(); ++s) {
      const Uint128 p = Eligible(cursor, static_cast<int64_t>(s)) ? cursor.weights[s] : 0;
      const Uint128 next_k = k * (remaining - p) / remaining;
      const Uint128 next_k1 = k1 * (remaining - p) / remaining;
      if (k - next_k != k1 - next_k1) {
        chosen = s;
        break;
      }
      remaining -= p;
      k = next_k;
      k1 = next_k1;
    }
    MixtureSourceCursor& source = cursor.sources[chosen];
    if (source.draws >= sizes_[chosen] && exhaustion_ != Exhaustion::kRestart) {
      cursor.ended = true;  // kStop (kDrop left it out when its last example was drawn)
      return;
    }
    out->push_back(
        {static_cast<int64_t>(chosen), ExampleOf(static_cast<int64_t>(chosen), source.draws)});
    ++source.draws;
    ++cursor.position;
    if (exhaustion_ == Exhaustion::kDrop && source.draws >= sizes_[chosen]) {
      source.exhausted = true;
    }
  }
}

void MixtureSchedule::DrawTokens(MixtureCursor& cursor, int64_t count,
                                 std::vector<MixtureDraw>* out) const {
  // Each eligible source with the tokens of its next example; the heap's top
  // finishes first: (clock + next) / weight, compared exactly as
  // (clock_a + next_a) * weight_b < (clock_b + next_b) * weight_a.
  struct Entry {
    int64_t source;
    int64_t example;  // its next example (-1: exhausted, kStop)
    int64_t next;     // that example's tokens
  };
  std::vector<Entry> heap;
  const auto next_of = [&](int64_t s) {
    const MixtureSourceCursor& source = cursor.sources[static_cast<size_t>(s)];
    if (source.draws >= sizes_[static_cast<size_t>(s)] && exhaustion_ != Exhaustion::kRestart) {
      return Entry{s, -1, 0};
    }
    const int64_t example = ExampleOf(s, source.draws);
    return Entry{s, example, tokens_[static_cast<size_t>(s)][static_cast<size_t>(example)]};
  };
  // a after b in the heap: b finishes first.
  const auto later = [&](const Entry& a, const Entry& b) {
    const auto finish = [&](const Entry& e, int64_t other) {
      const auto s = static_cast<size_t>(e.source);
      return (static_cast<Int128>(cursor.sources[s].tokens) + e.next) *
             cursor.weights[static_cast<size_t>(other)];
    };
    const Int128 fa = finish(a, b.source), fb = finish(b, a.source);
    return fa != fb ? fa > fb : a.source > b.source;
  };
  for (int64_t s = 0; s < num_sources(); ++s) {
    if (Eligible(cursor, s)) heap.push_back(next_of(s));
  }
  std::make_heap(heap.begin(), heap.end(), later);
  const int64_t end = cursor.position + count;
  while (!cursor.ended && cursor.position < end) {
    if (heap.empty()) {
      cursor.ended = true;
      return;
    }
    std::pop_heap(heap.begin(), heap.end(), later);
    const Entry top = heap.back();
    heap.pop_back();
    if (top.example < 0) {
      cursor.ended = true;  // kStop
      return;
    }
    MixtureSourceCursor& source = cursor.sources[static_cast<size_t>(top.source)];
    out->push_back({top.source, top.example});
    ++source.draws;
    source.tokens = Counted(source.tokens, top.next, names_[static_cast<size_t>(top.source)]);
    ++cursor.position;
    if (exhaustion_ == Exhaustion::kDrop &&
        source.draws >= sizes_[static_cast<size_t>(top.source)]) {
      source.exhausted = true;
      continue;
    }
    heap.push_back(next_of(top.source));
    std::push_heap(heap.begin(), heap.end(), later);
  }
}

}  // namespace jaxbatch
