#pragma once
// Character text for language models: a UTF-8 file read into character ids, its vocabulary
// (the sorted distinct characters, kept with a model so that its ids map back to text), and
// windows of ids with next-character targets.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data {

/// The characters (Unicode code points) a character model knows; id i is the i-th smallest.
class CharVocabulary {
 public:
  /// The sorted distinct characters of `text`.
  static CharVocabulary of_text(const std::u32string& text);
  /// From its characters as UTF-8 (what utf8() returns); ValueError naming `source` unless they
  /// are valid UTF-8, distinct, sorted and at least 2.
  static CharVocabulary from_utf8(const std::string& characters, const std::string& source);

  std::int64_t size() const { return static_cast<std::int64_t>(chars_.size()); }
  /// Every character in id order, as UTF-8.
  std::string utf8() const;
  /// The id of each character of `text`; ValueError naming `source`, the character and its
  /// position for one the vocabulary lacks.
  std::vector<std::int32_t> encode(const std::u32string& text, const std::string& source) const;
  /// The characters of `ids` as UTF-8; ValueError for an id outside [0, size()).
  std::string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::u32string chars_;
};

/// `bytes` decoded as UTF-8 (a leading byte-order mark dropped). ValueError naming `source` and
/// the byte offset for a NUL byte (a binary file) or a byte sequence that is not UTF-8.
std::u32string decode_utf8(const std::string& bytes, const std::string& source);
std::string encode_utf8(const std::u32string& text);

struct CharTextOptions {
  /// Characters per example: x is (N, sequence_length) ids, y the same shifted by one.
  std::int64_t sequence_length = 64;
  /// The last fraction of the text that is held out for validation.
  double validation_split = 0.1;
};

/// A text cut into training and validation windows.
struct CharText {
  CharVocabulary vocabulary;  // of the whole text
  /// int32 (N, sequence_length): windows of the first (1 - validation_split) of the text, one
  /// starting every sequence_length characters; y holds each position's next character.
  Tensor x_train, y_train;
  /// The same over the held-out end of the text.
  Tensor x_validation, y_validation;
  std::int64_t characters = 0;
  /// -sum p log p over the text's character frequencies, in nats per character: the loss of a
  /// model that knows only how often each character occurs.
  double unigram_entropy = 0;
};

/// Reads `paths` (UTF-8 text files, concatenated in order) into windows. IOError naming the
/// path for a missing or unreadable file; ValueError naming it for an empty file, a binary or
/// non-UTF-8 one, and a text too short to give one training and one validation window of
/// sequence_length + 1 characters.
CharText read_char_text(const std::vector<std::string>& paths, const CharTextOptions& options = {});

}  // namespace lockstep::data
