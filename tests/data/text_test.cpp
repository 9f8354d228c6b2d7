// Character text for language models: windows with next-character targets, the vocabulary's
// round trip, and the inputs a reader must refuse by name.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/error_message.hpp"
#include "data/test_util.hpp"
#include "lockstep/data/text.hpp"

namespace lockstep::test {
namespace {

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(CharText, WindowsHoldNextCharacterTargetsAndTheEndIsHeldOut) {
  TempDir dir;
  // 40 characters: 36 for training, the last 4 for validation (10%); windows of 3.
  const std::string text = "abcdefghijabcdefghijabcdefghijabcdefghij";
  const auto t = data::read_char_text({write(dir, "t.txt", text)}, {.sequence_length = 3});
  EXPECT_EQ(t.characters, 40);
  EXPECT_EQ(t.vocabulary.size(), 10);
  EXPECT_EQ(t.vocabulary.utf8(), "abcdefghij");
  ASSERT_EQ(t.x_train.shape(), (Shape{11, 3}));  // (36 - 1) / 3 windows
  ASSERT_EQ(t.x_validation.shape(), (Shape{1, 3}));
  const auto x = t.x_train.to_vector<std::int32_t>(), y = t.y_train.to_vector<std::int32_t>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i], static_cast<std::int32_t>(i % 10)) << i;
    EXPECT_EQ(y[i], static_cast<std::int32_t>((i + 1) % 10)) << i;
  }
  EXPECT_EQ(t.x_validation.to_vector<std::int32_t>(), (std::vector<std::int32_t>{6, 7, 8}));  // "ghi"
  EXPECT_EQ(t.y_validation.to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_NEAR(t.unigram_entropy, std::log(10.0), 1e-12);  // ten characters, equally often
}

TEST(CharText, FilesAreConcatenatedAndUnicodeCharactersAreOneId) {
  TempDir dir;
  const std::string a = write(dir, "a.txt", "\xEF\xBB\xBFna\xC3\xAFve caf\xC3\xA9 ");  // BOM, naïve café
  const std::string b = write(dir, "b.txt", "\xE2\x82\xAC 5 \xF0\x9F\x98\x80 na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC 5");
  const auto t = data::read_char_text({a, b}, {.sequence_length = 2});
  EXPECT_EQ(t.characters, 11 + 20);
  const std::string chars = t.vocabulary.utf8();
  EXPECT_EQ(data::decode_utf8(chars, "v").size(), static_cast<std::size_t>(t.vocabulary.size()));
  EXPECT_EQ(t.vocabulary.size(), 12);  // space 5 a c e f n v ï é € 😀
  const std::u32string some = U"caf\u00e9 \u20ac";
  const auto ids = t.vocabulary.encode(some, "s");
  EXPECT_EQ(t.vocabulary.decode(std::vector<std::int64_t>(ids.begin(), ids.end())), data::encode_utf8(some));
  // Saved and read back, the vocabulary maps the same ids.
  const auto again = data::CharVocabulary::from_utf8(chars, "saved");
  EXPECT_EQ(again.encode(some, "s"), ids);
}

TEST(CharText, BadInputIsRefusedByName) {
  TempDir dir;
  EXPECT_NE(io_message_of([&] { data::read_char_text({dir.file("missing.txt")}); }).find("missing.txt' does not exist"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "empty.txt", "")}); }).find("empty.txt' is empty"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "bin.dat", std::string("ab\0cd", 5))}); })
                .find("NUL byte at offset 2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "latin1.txt", "caf\xE9 au lait")}); })
                .find("not UTF-8 text: byte 0xE9 at offset 3"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "cut.txt", "ab\xE2\x82")}); }).find("offset 2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "overlong.txt", "a\xC0\xAF")}); }).find("offset 1"),
            std::string::npos);
  // 100 characters: the last 10 cannot hold a validation window of 64 + 1.
  const std::string short_text = write(dir, "short.txt", std::string(50, 'a') + std::string(50, 'b'));
  EXPECT_NE(message_of([&] { data::read_char_text({short_text}, {.sequence_length = 64}); })
                .find("holds 100 characters: too few"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::read_char_text({write(dir, "one.txt", std::string(400, 'x'))}, {.sequence_length = 8}); })
                .find("a single distinct character"),
            std::string::npos);
  const auto t = data::read_char_text({write(dir, "ok.txt", std::string(200, 'a') + "b")}, {.sequence_length = 4});
  EXPECT_NE(message_of([&] { t.vocabulary.encode(U"abc", "--prompt"); }).find("--prompt: character 'c' (U+0063) at position 2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { t.vocabulary.decode({0, 2}); }).find("character id 2 is outside"), std::string::npos);
  EXPECT_NE(message_of([&] { data::CharVocabulary::from_utf8("ba", "vocabulary.json"); }).find("distinct and sorted"),
            std::string::npos);
}

// A file with no size to check first (a device): read up to the bound, then refused, not read forever.
TEST(CharText, AnEndlessFileIsRefusedAtTheBound) {
  EXPECT_NE(message_of([&] { data::read_char_text({"/dev/zero"}); }).find("'/dev/zero' holds more than"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::test
