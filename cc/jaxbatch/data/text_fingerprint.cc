#include "jaxbatch/data/text_fingerprint.h"

#include <cstddef>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// Seeds that keep the lengths' stream and the bytes' stream apart.
constexpr uint64_t kLengthsSeed = 0x7465787431656e73;  // "text1ens"
constexpr uint64_t kBytesSeed = 0x7465787462797465;    // "textbyte"
// A null document's length in the lengths' stream: no text, unlike "".
constexpr int64_t kNullLength = -1;

}  // namespace

TextFingerprint::TextFingerprint() : lengths_(kLengthsSeed), bytes_(kBytesSeed) {}

void TextFingerprint::Add(std::span<const int64_t> offsets, std::span<const uint8_t> data,
                          std::span<const uint8_t> valid) {
  const size_t n = valid.size();
  if (offsets.size() != n + 1) {
    throw InvalidArgumentError(StrCat("TextFingerprint: expected ", n + 1, " offsets for ", n,
                                      " documents, found ", offsets.size()));
  }
  const int64_t size = static_cast<int64_t>(data.size());
  if (offsets[0] < 0 || offsets[n] > size) {
    throw InvalidArgumentError(StrCat("TextFingerprint: offsets span [", offsets[0], ", ",
                                      offsets[n], "), outside the ", size, " bytes of text"));
  }
  for (size_t i = 0; i < n; ++i) {  // Checked before anything is hashed.
    if (offsets[i + 1] < offsets[i]) {
      throw InvalidArgumentError(StrCat("TextFingerprint: document ", documents_ + int64_t(i),
                                        " ends at byte ", offsets[i + 1], " before it starts (",
                                        offsets[i], ")"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t length = valid[i] ? offsets[i + 1] - offsets[i] : kNullLength;
    lengths_.Update(&length, sizeof(length));
    if (valid[i]) bytes_.Update(data.data() + offsets[i], static_cast<size_t>(length));
  }
  documents_ += static_cast<int64_t>(n);
}

uint64_t TextFingerprint::Digest() const {
  const uint64_t parts[2] = {lengths_.Digest(), bytes_.Digest()};
  return Hash64(parts, sizeof(parts), Hash64(&documents_, sizeof(documents_)));
}

}  // namespace jaxbatch
