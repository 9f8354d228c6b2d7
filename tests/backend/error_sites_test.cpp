// Error sites: the number a device check's mark holds for the op that set it, and back (no device:
// the table is the host's).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backend/error_marks.hpp"

namespace lockstep {
namespace {

// A check's site: one number per name, whatever the address it comes from, and its name back.
TEST(ErrorSites, AreOneNumberPerNameAndGiveTheNameBack) {
  const std::string copy = "a test site";  // the same characters at another address
  const std::int64_t site = backend::error_site("a test site");
  EXPECT_EQ(backend::error_site("a test site"), site);
  EXPECT_EQ(backend::error_site(copy.c_str()), site);
  EXPECT_NE(backend::error_site("another test site"), site);
  EXPECT_STREQ(backend::error_site_name(site), "a test site");
  EXPECT_STREQ(backend::error_site_name(-1), "a device check");
}

}  // namespace
}  // namespace lockstep
