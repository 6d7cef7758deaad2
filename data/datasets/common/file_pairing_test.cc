#include "data/datasets/common/file_pairing.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::datasets {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(FilePairingTest, EverythingPairedIsOk) {
  std::string warning = "stale";
  EXPECT_TRUE(
      ApplyPairingPolicy("X", UnpairedFiles(), "label", "i", "l", "XOptions.allow", false, &warning)
          .ok());
  EXPECT_THAT(warning, IsEmpty());
  EXPECT_THAT(DescribeUnpaired(UnpairedFiles(), "label", "i", "l"), IsEmpty());
}

TEST(FilePairingTest, UnpairedFilesAreAnErrorNamingThem) {
  UnpairedFiles unpaired;
  unpaired.images = {"a.png"};
  unpaired.annotations = {"1.txt", "2.txt", "3.txt", "4.txt", "5.txt", "6.txt", "7.txt"};
  std::string warning;
  const absl::Status status =
      ApplyPairingPolicy("Fmt", unpaired, "label", "imgs", "labels",
                         "FmtOptions.allow_unpaired_files", false, &warning);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("Fmt: the images and label files do not pair up"),
                    HasSubstr("1 image in 'imgs' has no label in 'labels' (a.png)"),
                    HasSubstr("7 label files in 'labels' have no image in 'imgs' (1.txt, 2.txt, "
                              "3.txt, 4.txt, 5.txt, and 2 more)"),
                    HasSubstr("set FmtOptions.allow_unpaired_files: true")));
  EXPECT_THAT(warning, IsEmpty());
}

TEST(FilePairingTest, AllowedUnpairedFilesGiveAWarningWithTheCounts) {
  UnpairedFiles unpaired;
  unpaired.annotations = {"gt_img_9.txt"};
  std::string warning;
  EXPECT_TRUE(
      ApplyPairingPolicy("Fmt", unpaired, "label", "i", "l", "FmtOptions.allow", true, &warning)
          .ok());
  EXPECT_EQ(warning, "skipped 0 images without label and 1 label files without image");
}

TEST(FilePairingTest, OtherFilesAreCountedWithTheFirstNames) {
  OtherFiles other;
  EXPECT_EQ(other.Describe(), "") << "nothing ignored, nothing said";
  other.Add("readme.txt");
  EXPECT_EQ(other.Describe(), "1 other file ignored (readme.txt)");
  for (int i = 0; i < 6; ++i) other.Add(absl::StrCat("x", i));
  EXPECT_EQ(other.count(), 7);
  EXPECT_EQ(other.Describe(), "7 other files ignored (readme.txt, x0, x1, x2, x3, and 2 more)");
}

}  // namespace
}  // namespace vision::data::datasets
