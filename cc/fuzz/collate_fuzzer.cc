// libFuzzer target: collation of random datasets (every dtype, inner shapes,
// aligned, unaligned and fixed columns) with random plans, pad values and
// thread counts. Every array must equal a naive reference built element by
// element from the dataset and the plan's rows; a pad value a column cannot
// hold, an unaligned column in a packed batch, or a values buffer shorter
// than the column's offsets claim must be InvalidArgumentError naming that
// column, and nothing else may throw.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/collate/collator.h"

namespace jaxbatch::fuzz {
namespace {

constexpr DType kAllDTypes[] = {DType::kBool,   DType::kInt8,    DType::kInt16,    DType::kInt32,
                                DType::kInt64,  DType::kUInt8,   DType::kUInt16,   DType::kUInt32,
                                DType::kUInt64, DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                                DType::kFloat64};

using Bytes = std::vector<uint8_t>;

template <typename T>
Bytes BytesOf(T value) {
  Bytes out(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// A pad value and the bytes it must become in `dtype`, or nullopt when the
// dtype cannot hold it. Floats are k/4 with |k| <= 255, exact in every
// float type, so their bytes are known without a conversion routine.
struct Pad {
  Scalar value;
  std::optional<Bytes> bytes;
};

template <typename T>
Pad IntegerPad(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {  // in range, as the caller's integer type
      const T v = in.ConsumeIntegral<T>();
      return {Scalar(v), BytesOf(v)};
    }
    case 1: {  // just past either end, when that fits a 64-bit integer
      if constexpr (std::is_same_v<T, uint64_t>) {
        return {Scalar(int64_t{-1}), std::nullopt};
      } else if constexpr (std::is_same_v<T, int64_t>) {
        return {Scalar(uint64_t{1} << 63), std::nullopt};
      } else if constexpr (std::is_signed_v<T>) {
        const int64_t v = in.ConsumeBool() ? int64_t{std::numeric_limits<T>::max()} + 1
                                           : int64_t{std::numeric_limits<T>::min()} - 1;
        return {Scalar(v), std::nullopt};
      } else {
        return {Scalar(uint64_t{std::numeric_limits<T>::max()} + 1), std::nullopt};
      }
    }
    case 2: {  // an integral double in range
      const auto v =
          static_cast<T>(in.ConsumeIntegralInRange<int>(std::is_signed_v<T> ? -100 : 0, 100));
      if (std::is_unsigned_v<T> && in.ConsumeBool()) return {Scalar(-1.0), std::nullopt};
      return {Scalar(static_cast<double>(v)), BytesOf(v)};
    }
    default:
      return {Scalar(0.5), std::nullopt};  // not integral
  }
}

uint16_t HalfBitsOfExact(float f) {  // f is 0 or k/4, |k| <= 255: normal in binary16
  if (f == 0.0f) return 0;
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t exponent = ((x >> 23) & 0xffu) - 127u + 15u;
  return static_cast<uint16_t>(((x >> 16) & 0x8000u) | (exponent << 10) | ((x >> 13) & 0x3ffu));
}

Pad ConsumePad(FuzzedDataProvider& in, DType dtype) {
  switch (dtype) {
    case DType::kBool: {
      const int v = in.ConsumeIntegralInRange<int>(0, 2);
      const Scalar s = in.ConsumeBool() ? Scalar(int64_t{v}) : Scalar(static_cast<double>(v));
      return {s, v < 2 ? std::optional<Bytes>(Bytes{static_cast<uint8_t>(v)}) : std::nullopt};
    }
    case DType::kInt8:
      return IntegerPad<int8_t>(in);
    case DType::kInt16:
      return IntegerPad<int16_t>(in);
    case DType::kInt32:
      return IntegerPad<int32_t>(in);
    case DType::kInt64:
      return IntegerPad<int64_t>(in);
    case DType::kUInt8:
      return IntegerPad<uint8_t>(in);
    case DType::kUInt16:
      return IntegerPad<uint16_t>(in);
    case DType::kUInt32:
      return IntegerPad<uint32_t>(in);
    case DType::kUInt64:
      return IntegerPad<uint64_t>(in);
    default: {
      const int k = in.ConsumeIntegralInRange<int>(-255, 255);
      const float f = static_cast<float>(k) / 4.0f;
      const Scalar s =
          in.ConsumeBool() && k % 4 == 0 ? Scalar(int64_t{k / 4}) : Scalar(static_cast<double>(f));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (dtype == DType::kFloat16) return {s, BytesOf(HalfBitsOfExact(f))};
      if (dtype == DType::kBFloat16) return {s, BytesOf(static_cast<uint16_t>(bits >> 16))};
      if (dtype == DType::kFloat32) return {s, BytesOf(f)};
      return {s, BytesOf(static_cast<double>(f))};
    }
  }
}

// One column's data, owned here; the dataset points into it.
struct Source {
  std::string name;
  DType dtype;
  std::vector<int64_t> inner;
  bool fixed = false;
  std::vector<int64_t> offsets{0};
  Bytes values;
  int64_t inner_size() const {
    int64_t n = 1;
    for (int64_t d : inner) n *= d;
    return n;
  }
  int64_t row_bytes() const { return inner_size() * static_cast<int64_t>(ItemSize(dtype)); }
  int64_t length(int64_t e) const { return fixed ? 1 : offsets[e + 1] - offsets[e]; }
  const uint8_t* at(int64_t e) const {
    return values.data() + (fixed ? e : offsets[e]) * row_bytes();
  }
};

Source ConsumeSource(FuzzedDataProvider& in, std::string name, bool fixed,
                     const std::vector<int64_t>* lengths, int64_t n) {
  Source s{.name = std::move(name),
           .dtype = kAllDTypes[in.ConsumeIntegralInRange<size_t>(0, std::size(kAllDTypes) - 1)],
           .fixed = fixed};
  const int rank = in.ConsumeIntegralInRange<int>(0, 2);
  for (int k = 0; k < rank; ++k) s.inner.push_back(in.ConsumeIntegralInRange<int64_t>(0, 3));
  int64_t rows = 0;
  for (int64_t e = 0; e < n; ++e) {
    rows += fixed ? 1 : lengths ? (*lengths)[e] : in.ConsumeIntegralInRange<int64_t>(0, 12);
    if (!fixed) s.offsets.push_back(rows);
  }
  s.values.resize(static_cast<size_t>(rows * s.row_bytes()));
  for (uint8_t& b : s.values) b = in.ConsumeIntegral<uint8_t>();
  return s;
}

struct RefArray {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Bytes bytes;
};

// Collation by hand: element by element from the sources and the rows.
std::vector<RefArray> NaiveCollate(const std::vector<Source>& sources, const BatchView& view,
                                   bool packed, bool truncate,
                                   const std::map<std::string, Bytes>& pads, bool padded_segments) {
  const int64_t rows = view.shape.rows, length = view.shape.length;
  const int64_t slots = packed ? view.shape.segments : 1;
  std::vector<RefArray> out;
  auto append = [](Bytes& to, const uint8_t* from, int64_t n) {
    to.insert(to.end(), from, from + n);
  };
  auto i32 = [&](Bytes& to, int32_t v) { append(to, reinterpret_cast<const uint8_t*>(&v), 4); };
  for (const Source& s : sources) {
    const Bytes& pad = pads.at(s.name);
    const int64_t item = static_cast<int64_t>(ItemSize(s.dtype));
    auto pad_rows = [&](Bytes& to, int64_t n) {
      for (int64_t k = 0; k < n * s.inner_size(); ++k) append(to, pad.data(), item);
    };
    std::vector<int64_t> lead = {rows};
    if (s.fixed) {
      if (packed) lead.push_back(slots);
      RefArray a{s.name, s.dtype, lead, {}};
      a.shape.insert(a.shape.end(), s.inner.begin(), s.inner.end());
      for (int64_t r = 0; r < rows; ++r) {
        const auto examples = view.row_examples(r);
        for (int64_t e : examples) append(a.bytes, s.at(e), s.row_bytes());
        pad_rows(a.bytes, slots - static_cast<int64_t>(examples.size()));
      }
      out.push_back(std::move(a));
      continue;
    }
    const bool aligned = s.name != "c";
    int64_t width = length;
    if (!aligned) {
      width = 0;
      for (int64_t e = 0; e + 1 < static_cast<int64_t>(s.offsets.size()); ++e) {
        width = std::max(width, s.length(e));
      }
    }
    RefArray values{s.name, s.dtype, {rows, width}, {}};
    values.shape.insert(values.shape.end(), s.inner.begin(), s.inner.end());
    RefArray mask{s.name + "_mask", DType::kBool, {rows, width}, {}};
    RefArray ids{s.name + "_segment_ids", DType::kInt32, {rows, width}, {}};
    RefArray pos{s.name + "_positions", DType::kInt32, {rows, width}, {}};
    RefArray lens{s.name + "_lengths",
                  DType::kInt32,
                  packed ? std::vector<int64_t>{rows, slots} : std::vector<int64_t>{rows},
                  {}};
    RefArray starts{s.name + "_segment_starts", DType::kInt32, {rows, slots}, {}};
    for (int64_t r = 0; r < rows; ++r) {
      int64_t used = 0;
      int32_t segment = 0;
      const auto examples = view.row_examples(r);
      for (int64_t e : examples) {
        const int64_t n = std::min(s.length(e), width - used);
        FUZZ_CHECK(n == s.length(e) || truncate, "row %ld: example %ld does not fit", long(r),
                   long(e));
        append(values.bytes, s.at(e), n * s.row_bytes());
        ++segment;
        for (int64_t k = 0; k < n; ++k) {
          mask.bytes.push_back(1);
          i32(ids.bytes, segment);
          i32(pos.bytes, static_cast<int32_t>(k));
        }
        i32(lens.bytes, static_cast<int32_t>(n));
        i32(starts.bytes, static_cast<int32_t>(used));
        used += n;
      }
      pad_rows(values.bytes, width - used);
      for (int64_t k = used; k < width; ++k) {
        mask.bytes.push_back(0);
        i32(ids.bytes, 0);
        i32(pos.bytes, 0);
      }
      if (packed) {
        for (int64_t k = segment; k < slots; ++k) {
          i32(lens.bytes, 0);
          i32(starts.bytes, static_cast<int32_t>(used));
        }
      } else if (examples.empty()) {
        i32(lens.bytes, 0);
      }
    }
    out.push_back(std::move(values));
    if (packed) {
      out.push_back(std::move(ids));
      out.push_back(std::move(pos));
      out.push_back(std::move(lens));
      out.push_back(std::move(starts));
    } else {  // A padded row is one segment: its ids and positions, if asked.
      out.push_back(std::move(mask));
      out.push_back(std::move(lens));
      if (padded_segments) {
        out.push_back(std::move(ids));
        out.push_back(std::move(pos));
      }
    }
  }
  RefArray index{"example_index", DType::kInt64, {rows}, {}};
  if (packed) index.shape.push_back(slots);
  for (int64_t r = 0; r < rows; ++r) {
    const auto examples = view.row_examples(r);
    for (int64_t k = 0; k < slots; ++k) {
      const int64_t e = k < static_cast<int64_t>(examples.size()) ? examples[k] : -1;
      append(index.bytes, reinterpret_cast<const uint8_t*>(&e), 8);
    }
  }
  out.push_back(std::move(index));
  return out;
}

}  // namespace
}  // namespace jaxbatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jaxbatch;
  using namespace jaxbatch::fuzz;
  FuzzedDataProvider in(data, size);
  const int64_t n = in.ConsumeIntegralInRange<int64_t>(0, 24);
  std::vector<Source> sources;
  sources.push_back(ConsumeSource(in, "a", false, nullptr, n));  // the length column
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) lengths[static_cast<size_t>(e)] = sources[0].length(e);
  if (in.ConsumeBool()) sources.push_back(ConsumeSource(in, "b", false, &lengths, n));  // aligned
  if (in.ConsumeBool())
    sources.push_back(ConsumeSource(in, "c", false, nullptr, n));                     // own lengths
  if (in.ConsumeBool()) sources.push_back(ConsumeSource(in, "f", true, nullptr, n));  // fixed
  // Sometimes a values buffer shorter than its offsets (or example count)
  // claim, as a crafted Arrow file gives: the column must be refused, naming
  // it. The buffer is then an exact allocation, so a read past it is ASan's.
  std::string short_column;
  for (Source& s : sources) {
    if (!s.values.empty() && in.ConsumeProbability<float>() < 0.1f) {
      s.values.resize(s.values.size() - in.ConsumeIntegralInRange<size_t>(1, s.values.size()));
      s.values.shrink_to_fit();
      if (short_column.empty()) short_column = s.name;
    }
  }
  std::vector<RaggedColumn> columns;
  // Sometimes a column is gathered over two chunks split at example `k` (an
  // Arrow column of two record batches): it must read as the one buffer.
  std::vector<std::vector<int64_t>> chunk_offsets;
  chunk_offsets.reserve(2 * sources.size());
  try {
    for (const Source& s : sources) {
      if (in.ConsumeBool()) {
        const int64_t k = in.ConsumeIntegralInRange<int64_t>(0, n);
        const int64_t rows = s.fixed ? k : s.offsets[static_cast<size_t>(k)];
        const size_t split = std::min(s.values.size(), static_cast<size_t>(rows * s.row_bytes()));
        const std::span<const uint8_t> values(s.values);
        std::vector<RaggedColumn::Chunk> chunks(2);
        chunks[0] = {values.first(split), {}, k};
        chunks[1] = {values.subspan(split), {}, n - k};
        if (!s.fixed) {
          const auto middle = s.offsets.begin() + k;
          chunk_offsets.emplace_back(s.offsets.begin(), middle + 1);
          chunk_offsets.emplace_back(middle, s.offsets.end());
          for (int64_t& o : chunk_offsets.back()) o -= rows;
          chunks[0].offsets = chunk_offsets[chunk_offsets.size() - 2];
          chunks[1].offsets = chunk_offsets.back();
        }
        columns.push_back(
            RaggedColumn::Gathered(s.name, s.dtype, s.inner, s.fixed, chunks, {}, nullptr));
        continue;
      }
      columns.push_back(
          s.fixed ? RaggedColumn::Fixed(s.name, s.dtype, s.inner, s.values, n, nullptr)
                  : RaggedColumn::Ragged(s.name, s.dtype, s.inner, s.values, s.offsets, nullptr));
    }
  } catch (const InvalidArgumentError& e) {
    FUZZ_CHECK(!short_column.empty(), "refused: %s", e.what());
    FUZZ_CHECK(std::string(e.what()).find("'" + short_column + "'") != std::string::npos,
               "the error does not name column %s: %s", short_column.c_str(), e.what());
    return 0;
  }
  FUZZ_CHECK(short_column.empty(), "column %s is accepted over a values buffer cut short",
             short_column.c_str());
  std::vector<std::vector<std::string>> aligned;
  if (sources.size() > 1 && sources[1].name == "b") aligned.push_back({"a", "b"});
  const Dataset dataset(std::move(columns), aligned);

  const PlannerOptions options = ConsumePlanner(in, 16, false);
  BatchPlan plan;
  try {
    plan = Plan(lengths, options);
  } catch (const InvalidArgumentError&) {
    return 0;  // refused options or a too-long example: the plan fuzzer's ground
  }
  plan.length_column = in.ConsumeBool() ? "a" : "";

  // Pad values: some per column, a default for the rest.
  CollateOptions collate;
  const DType default_dtype_hint =
      kAllDTypes[in.ConsumeIntegralInRange<size_t>(0, std::size(kAllDTypes) - 1)];
  const Pad default_pad = ConsumePad(in, default_dtype_hint);
  collate.default_pad_value = default_pad.value;
  std::map<std::string, Bytes> pads;
  std::string first_bad;  // the first column (in order) collate must refuse
  for (const Source& s : sources) {
    std::optional<Bytes> bytes;
    if (in.ConsumeBool()) {
      const Pad pad = ConsumePad(in, s.dtype);
      collate.pad_values.emplace_back(s.name, pad.value);
      bytes = pad.bytes;
    } else {
      // The default, checked against this column's dtype by hand.
      Bytes out(8);
      try {
        EncodeScalar(default_pad.value, s.dtype, out.data(), "default");
        out.resize(ItemSize(s.dtype));
        bytes = out;
        if (s.dtype == default_dtype_hint) {
          FUZZ_CHECK(default_pad.bytes && *default_pad.bytes == out, "default pad in %s",
                     std::string(DTypeName(s.dtype)).c_str());
        }
      } catch (const InvalidArgumentError&) {
        FUZZ_CHECK(s.dtype != default_dtype_hint || !default_pad.bytes,
                   "a valid default pad refused for %s", std::string(DTypeName(s.dtype)).c_str());
      }
    }
    const bool unaligned_packed = plan.packed && !s.fixed && s.name == "c";
    if (first_bad.empty() && (!bytes || unaligned_packed)) first_bad = s.name;
    if (bytes) pads[s.name] = *bytes;
  }
  collate.num_threads = in.ConsumeIntegralInRange<int64_t>(1, 4);
  collate.min_bytes_per_thread = in.ConsumeIntegralInRange<int64_t>(1, 256);
  collate.padded_segments = in.ConsumeBool();

  for (int64_t b = 0; b < std::min<int64_t>(plan.num_batches(), 6); ++b) {
    std::vector<Array> got;
    try {
      got = Collate(dataset, plan, b, collate);
    } catch (const InvalidArgumentError& e) {
      FUZZ_CHECK(!first_bad.empty(), "refused: %s", e.what());
      const std::string msg = e.what();
      FUZZ_CHECK(msg.find("'" + first_bad + "'") != std::string::npos,
                 "the error does not name column %s: %s", first_bad.c_str(), e.what());
      return 0;
    }
    FUZZ_CHECK(first_bad.empty(), "column %s was not refused", first_bad.c_str());
    const std::vector<RefArray> want = NaiveCollate(
        sources, plan.batch(b), plan.packed, plan.allow_truncate, pads, collate.padded_segments);
    FUZZ_CHECK(got.size() == want.size(), "%zu arrays, reference %zu", got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const Array& g = got[k];
      const RefArray& w = want[k];
      FUZZ_CHECK(g.name == w.name && g.dtype == w.dtype && g.shape == w.shape,
                 "array %zu: %s vs reference %s", k, g.name.c_str(), w.name.c_str());
      FUZZ_CHECK(g.num_bytes() == static_cast<int64_t>(w.bytes.size()), "%s: %ld bytes, want %zu",
                 g.name.c_str(), long(g.num_bytes()), w.bytes.size());
      FUZZ_CHECK(w.bytes.empty() || std::memcmp(g.data, w.bytes.data(), w.bytes.size()) == 0,
                 "%s: values differ from the reference", g.name.c_str());
    }
  }
  return 0;
}
