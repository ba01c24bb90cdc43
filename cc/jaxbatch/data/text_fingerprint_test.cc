#include "jaxbatch/data/text_fingerprint.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// Documents as an Arrow string column lays them out (nullopt: a null one),
// with `gap` unused bytes before the first.
struct Column {
  std::vector<int64_t> offsets;
  std::vector<uint8_t> data;
  std::vector<uint8_t> valid;
};

Column Layout(const std::vector<const char*>& documents, size_t gap = 0) {
  Column c;
  c.data.assign(gap, '#');
  c.offsets.push_back(static_cast<int64_t>(gap));
  for (const char* d : documents) {
    if (d != nullptr) c.data.insert(c.data.end(), d, d + std::string(d).size());
    c.offsets.push_back(static_cast<int64_t>(c.data.size()));
    c.valid.push_back(d != nullptr);
  }
  return c;
}

uint64_t Fingerprint(const std::vector<std::vector<const char*>>& chunks, size_t gap = 0) {
  TextFingerprint f;
  for (const auto& chunk : chunks) {
    const Column c = Layout(chunk, gap);
    f.Add(c.offsets, c.data, c.valid);
  }
  return f.Digest();
}

TEST(TextFingerprintTest, EqualDocumentsHashAlikeWhateverTheChunksAndBuffers) {
  const uint64_t whole = Fingerprint({{"a b", "", nullptr, "cd"}});
  EXPECT_EQ(whole, Fingerprint({{"a b"}, {"", nullptr}, {}, {"cd"}}));
  EXPECT_EQ(whole, Fingerprint({{"a b", ""}, {nullptr, "cd"}}, /*gap=*/5));
}

TEST(TextFingerprintTest, AnyChangedByteBoundaryOrNullChangesIt) {
  const uint64_t base = Fingerprint({{"ab", "c", ""}});
  EXPECT_NE(base, Fingerprint({{"ab", "d", ""}}));         // a byte
  EXPECT_NE(base, Fingerprint({{"a", "bc", ""}}));         // a boundary
  EXPECT_NE(base, Fingerprint({{"ab", "c", nullptr}}));    // "" is not null
  EXPECT_NE(base, Fingerprint({{"ab", "c"}}));             // a document fewer
  EXPECT_NE(Fingerprint({{}}), Fingerprint({{nullptr}}));  // none is not one null
  EXPECT_NE(Fingerprint({{""}}), Fingerprint({{"", ""}}));
}

TEST(TextFingerprintTest, DigestIsStable) {
  // Stored in journals: this value must never change.
  EXPECT_EQ(Fingerprint({{"hello", nullptr, "world"}}), 2764376976714569979u);
  TextFingerprint empty;
  EXPECT_EQ(empty.documents(), 0);
  EXPECT_EQ(empty.Digest(), TextFingerprint().Digest());
}

TEST(TextFingerprintTest, DamagedOffsetsAreRefusedAndAddNothing) {
  Column c = Layout({"ab", "cd"});
  TextFingerprint f;
  const uint64_t before = f.Digest();
  std::vector<int64_t> past_end = c.offsets;
  past_end.back() = 99;
  EXPECT_THROW(f.Add(past_end, c.data, c.valid), InvalidArgumentError);
  std::vector<int64_t> backwards = {0, 3, 1};
  EXPECT_THROW(f.Add(backwards, c.data, c.valid), InvalidArgumentError);
  std::vector<int64_t> negative = {-1, 2, 4};
  EXPECT_THROW(f.Add(negative, c.data, c.valid), InvalidArgumentError);
  EXPECT_THROW(f.Add(std::span<const int64_t>(c.offsets).first(2), c.data, c.valid),
               InvalidArgumentError);
  EXPECT_EQ(f.Digest(), before);
  EXPECT_EQ(f.documents(), 0);
}

}  // namespace
}  // namespace jaxbatch
