// load_and_resume: the jaxbatch Loader without Python.
//
// Loads a dataset of token sequences on two "processes" (two shards of one
// shuffled stream, as two hosts would), checks that every epoch's shards are
// disjoint, cover the data and have equal step counts and shapes, then
// stops one shard midway, restores it from its LoaderState and checks that
// the rest of its stream is the uninterrupted one, batch for batch. Last, it
// shows the state refused by the other shard's loader. Exits non-zero when
// anything is inconsistent, so ctest runs it as a test.
//
// The state also resumes in another process, from its text in a file
// (`make test` checks that head + tail is the whole run, byte for byte):
//   load_and_resume run               prints shard 0's batches, one a line
//   load_and_resume save STATE N      prints the first N and saves the state
//   load_and_resume resume STATE      restores it and prints the rest
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/jaxbatch.h"

namespace {

using jaxbatch::Array;
using jaxbatch::Dataset;
using jaxbatch::Loader;
using jaxbatch::LoaderOptions;
using jaxbatch::LoaderState;

constexpr int64_t kNumExamples = 3000;
constexpr int64_t kEpochs = 2;

// A batch as what it holds: its example ids (-1 for padding) and shapes.
struct Seen {
  std::vector<int64_t> examples;
  std::vector<std::vector<int64_t>> shapes;
  bool operator==(const Seen&) const = default;
};

Seen Look(const std::vector<Array>& arrays) {
  Seen seen;
  for (const Array& a : arrays) {
    seen.shapes.push_back(a.shape);
    if (a.name != "example_index") continue;
    int64_t n = 1;
    for (int64_t d : a.shape) n *= d;
    seen.examples.resize(static_cast<size_t>(n));
    std::memcpy(seen.examples.data(), a.data, static_cast<size_t>(n) * sizeof(int64_t));
  }
  return seen;
}

std::vector<Seen> Drain(Loader& loader) {
  std::vector<Seen> out;
  while (std::optional<jaxbatch::LoadedBatch> batch = loader.Next())
    out.push_back(Look(batch->arrays));
  return out;
}

// Prints `limit` batches (-1: all) as lines of example ids.
void PrintBatches(Loader& loader, int64_t limit) {
  for (int64_t b = 0; limit < 0 || b < limit; ++b) {
    const std::optional<jaxbatch::LoadedBatch> batch = loader.Next();
    if (!batch) break;
    std::printf("epoch %lld step %lld:", static_cast<long long>(batch->epoch),
                static_cast<long long>(batch->step));
    for (int64_t e : Look(batch->arrays).examples) std::printf(" %lld", static_cast<long long>(e));
    std::printf("\n");
  }
}

// The run, the head or the tail of shard 0's stream, in this process; the
// state between head and tail travels as its text (load/state_json.h).
int RunInSteps(const std::shared_ptr<const Dataset>& ds, const LoaderOptions& options, int argc,
               char** argv) {
  const std::string mode = argv[1];
  if (mode == "run" && argc == 2) {
    Loader loader(ds, options);
    PrintBatches(loader, -1);
  } else if (mode == "save" && argc == 4) {
    Loader loader(ds, options);
    PrintBatches(loader, std::atoll(argv[3]));
    const std::string text = jaxbatch::LoaderStateToJson(loader.state());
    jaxbatch::WriteFileAtomic(argv[2],
                              {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  } else if (mode == "resume" && argc == 3) {
    std::ifstream in(argv[2]);
    if (!in) {
      std::fprintf(stderr, "load_and_resume: cannot read %s\n", argv[2]);
      return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    // A state of another stream (data, planner, shuffle, shard, seed) throws here.
    Loader loader(ds, options, jaxbatch::LoaderStateFromJson(text.str()));
    PrintBatches(loader, -1);
  } else {
    std::fprintf(stderr, "usage: load_and_resume [run | save STATE N | resume STATE]\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Token sequences of 1 to 200 tokens, owned by shared vectors the column keeps alive.
  std::mt19937 rng(5);
  auto tokens = std::make_shared<std::vector<int32_t>>();
  auto offsets = std::make_shared<std::vector<int64_t>>(1, 0);
  for (int64_t i = 0; i < kNumExamples; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    for (int64_t t = 0; t < n; ++t) tokens->push_back(static_cast<int32_t>(i));
    offsets->push_back(static_cast<int64_t>(tokens->size()));
  }
  auto owner = std::make_shared<std::pair<decltype(tokens), decltype(offsets)>>(tokens, offsets);
  const auto ds = std::make_shared<const Dataset>(
      std::vector<jaxbatch::RaggedColumn>{jaxbatch::RaggedColumn::Ragged(
          "tokens", jaxbatch::DType::kInt32, {}, tokens->data(),
          static_cast<int64_t>(tokens->size()), offsets->data(), kNumExamples, owner)});

  auto options = [](int64_t shard) {
    LoaderOptions o;
    o.schedule.planner = jaxbatch::AutoBucketsOptions{.max_shapes = 4, .token_budget = 4096};
    o.schedule.shuffle = jaxbatch::ShuffleMode::kGlobal;
    o.schedule.seed = 42;
    o.schedule.shard_index = shard;
    o.schedule.shard_count = 2;
    o.epochs = kEpochs;
    o.num_threads = 2;
    return o;
  };
  if (argc > 1) {
    try {
      return RunInSteps(ds, options(0), argc, argv);
    } catch (const jaxbatch::Error& e) {
      std::fprintf(stderr, "load_and_resume: %s\n", e.what());
      return 1;
    }
  }
  int problems = 0;
  auto fail = [&](const std::string& what) {
    ++problems;
    std::fprintf(stderr, "load_and_resume: %s\n", what.c_str());
  };

  Loader first(ds, options(0)), second(ds, options(1));
  const std::vector<Seen> a = Drain(first), b = Drain(second);
  if (a.size() != b.size()) fail("the shards have different step counts");
  std::multiset<int64_t> examples;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    if (a[t].shapes != b[t].shapes) fail("step " + std::to_string(t) + " differs in shape");
    for (const Seen* s : {&a[t], &b[t]}) {
      for (int64_t e : s->examples) {
        if (e >= 0) examples.insert(e);
      }
    }
  }
  const LoaderState end = first.state();
  for (int64_t e = 0; e < kNumExamples; ++e) {
    // The plan's remainder is padded, so every example comes once per epoch.
    if (examples.count(e) != static_cast<size_t>(kEpochs)) {
      fail("example " + std::to_string(e) + " is not seen once per epoch");
      break;
    }
  }
  std::printf("2 shards x %lld epochs: %zu steps each, %lld examples per shard seen by shard 0\n",
              static_cast<long long>(kEpochs), a.size(), static_cast<long long>(end.examples));

  // Stop shard 0 a third of the way in, restore it, and compare.
  const size_t stop = a.size() / 3;
  LoaderState saved;
  {
    Loader interrupted(ds, options(0));
    for (size_t t = 0; t < stop; ++t) interrupted.Next();
    saved = interrupted.state();
  }
  Loader resumed(ds, options(0), saved);
  const std::vector<Seen> rest = Drain(resumed);
  if (rest != std::vector<Seen>(a.begin() + static_cast<std::ptrdiff_t>(stop), a.end())) {
    fail("the restored stream differs from the uninterrupted one");
  }
  std::printf("restored at epoch %lld step %lld: the %zu batches after it are the same\n",
              static_cast<long long>(saved.epoch), static_cast<long long>(saved.step), rest.size());

  // A state belongs to its stream: shard 1's loader refuses shard 0's.
  try {
    Loader wrong(ds, options(1), saved);
    fail("shard 1 accepted shard 0's state");
  } catch (const jaxbatch::InvalidArgumentError& e) {
    std::printf("shard 1 refuses it: %s\n", e.what());
  }
  return problems == 0 ? 0 : 1;
}
