// TextFingerprint: what a tokenizing job keys a column of text on, so that a
// re-run over other documents is refused instead of mixing two corpora's
// tokens.
//
// Documents come in chunks laid out as an Arrow string column is: int64
// offsets [n + 1] into a buffer of UTF-8 bytes, and one validity byte per
// document (0: a null document, which has no text). The digest covers the
// document count, each document's byte length (-1 for a null one) and its
// bytes, in order; it is the same however the documents are split into
// chunks or placed in their buffers (a slice whose offsets do not start at
// 0 included), and any changed byte, boundary or null changes it. It reads
// each byte once, at several GB/s. The digest is stored in job journals: its
// value for given documents never changes.
//
// Example:
//   TextFingerprint fingerprint;
//   for (const Chunk& c : chunks) fingerprint.Add(c.offsets, c.data, c.valid);
//   uint64_t key = fingerprint.Digest();
#ifndef JAXBATCH_DATA_TEXT_FINGERPRINT_H_
#define JAXBATCH_DATA_TEXT_FINGERPRINT_H_

#include <cstdint>
#include <span>

#include "jaxbatch/base/hash.h"

namespace jaxbatch {

class TextFingerprint {
 public:
  TextFingerprint();

  // Adds the next valid.size() documents: document i is data[offsets[i],
  // offsets[i + 1]) when valid[i] != 0. Throws InvalidArgumentError, and adds
  // nothing, when offsets are not valid.size() + 1 nondecreasing positions
  // inside data (a damaged or crafted column).
  void Add(std::span<const int64_t> offsets, std::span<const uint8_t> data,
           std::span<const uint8_t> valid);

  // The fingerprint of every document added so far.
  uint64_t Digest() const;

  int64_t documents() const { return documents_; }

 private:
  Hash64Stream lengths_;
  Hash64Stream bytes_;
  int64_t documents_ = 0;
};

}  // namespace jaxbatch

#endif  // JAXBATCH_DATA_TEXT_FINGERPRINT_H_
