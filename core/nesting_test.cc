#include "core/nesting.h"

#include <string>

#include "gtest/gtest.h"

namespace vision::core {
namespace {

std::string Nested(int depth, char open, char close) {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(FindExcessNestingTest, JsonAtTheLimitPassesOneDeeperFailsAtTheBracket) {
  EXPECT_EQ(FindExcessNesting(Nested(100, '[', ']'), TextSyntax::kJson), std::nullopt);
  EXPECT_EQ(FindExcessNesting(Nested(101, '[', ']'), TextSyntax::kJson), 100u);
  // Mixed lists and objects count alike.
  EXPECT_EQ(FindExcessNesting(R"({"a": [{"b": [1]}]})", TextSyntax::kJson, 3), 13u);
  EXPECT_EQ(FindExcessNesting(R"({"a": [{"b": [1]}]})", TextSyntax::kJson, 4), std::nullopt);
}

TEST(FindExcessNestingTest, SiblingsDoNotAddUp) {
  std::string text = "[";
  for (int i = 0; i < 1000; ++i) text += "[[1]],";
  text += "[]]";
  EXPECT_EQ(FindExcessNesting(text, TextSyntax::kJson, 3), std::nullopt);
}

TEST(FindExcessNestingTest, BracketsInsideStringsAndCommentsDoNotCount) {
  const std::string deep_string = "\"" + std::string(500, '[') + "\\\"" + "\"";
  EXPECT_EQ(FindExcessNesting("[" + deep_string + "]", TextSyntax::kJson, 1), std::nullopt);
  const std::string proto = "name: '{{{{{{' # {{{{{{{{{{\nseed: 1\ntext: \"<<<<\\\"<<\"";
  EXPECT_EQ(FindExcessNesting(proto, TextSyntax::kProtoText, 0), std::nullopt);
  // In JSON a # is no comment and a ' no quote.
  EXPECT_EQ(FindExcessNesting("[\"#\", '[']", TextSyntax::kJson, 1), 7u);
}

TEST(FindExcessNestingTest, ProtoTextCountsBracesAnglesAndLists) {
  const std::string text = "a { b < c: [ 1 ] > }";
  EXPECT_EQ(FindExcessNesting(text, TextSyntax::kProtoText, 3), std::nullopt);
  EXPECT_EQ(FindExcessNesting(text, TextSyntax::kProtoText, 2), 11u);
  // Angles are no brackets in JSON.
  EXPECT_EQ(FindExcessNesting("[<<<<<<]", TextSyntax::kJson, 1), std::nullopt);
}

TEST(FindExcessNestingTest, UnbalancedTextIsLeftToTheParser) {
  EXPECT_EQ(FindExcessNesting("]]]]}}}}[", TextSyntax::kJson, 1), std::nullopt);
  EXPECT_EQ(FindExcessNesting("\"unterminated [[[[", TextSyntax::kJson, 1), std::nullopt);
}

TEST(CheckNestingTest, ErrorNamesSourceLineColumnAndByte) {
  const std::string text = "seed: 1\nmodel { " + Nested(120, '{', '}') + " }";
  const absl::Status status = CheckNesting("x.pbtxt", text, TextSyntax::kProtoText,
                                           "a pipeline config nests at most 8 deep");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // Line 2 is "model { {{{...": the 101st opening brace is the 100th of the run, column 108.
  EXPECT_NE(status.message().find("x.pbtxt: line 2, column 108 (byte 115): brackets nest more "
                                  "than 100 deep; a pipeline config nests at most 8 deep"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(CheckNesting("x", "a { b { } }", TextSyntax::kProtoText, "").ok());
}

}  // namespace
}  // namespace vision::core
