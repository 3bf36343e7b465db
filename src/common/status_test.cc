// The one mapping of status codes to exit codes and HTTP statuses.
#include "common/status.h"

#include <gtest/gtest.h>

namespace tediserve {
namespace {

TEST(StatusMapping, ExitCodes) {
  EXPECT_EQ(ExitCode(StatusCode::kOk), 0);
  for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kDataLoss,
                       StatusCode::kOutOfRange, StatusCode::kAlreadyExists, StatusCode::kFailedPrecondition,
                       StatusCode::kUnimplemented}) {
    EXPECT_EQ(ExitCode(c), 2) << StatusCodeName(c);
  }
  for (StatusCode c : {StatusCode::kInternal, StatusCode::kUnavailable, StatusCode::kCancelled,
                       StatusCode::kDeadlineExceeded, StatusCode::kResourceExhausted, StatusCode::kIoError}) {
    EXPECT_EQ(ExitCode(c), 1) << StatusCodeName(c);
  }
  EXPECT_EQ(ExitCode(IoError("cannot write x")), 1);
}

TEST(StatusMapping, HttpStatuses) {
  EXPECT_EQ(HttpStatus(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatus(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatus(StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatus(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatus(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatus(StatusCode::kFailedPrecondition), 412);
  EXPECT_EQ(HttpStatus(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatus(StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatus(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatus(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatus(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatus(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatus(StatusCode::kIoError), 500);
  EXPECT_EQ(HttpStatus(StatusCode::kDataLoss), 500);
}

TEST(StatusMapping, NamesAndContext) {
  EXPECT_EQ(Unavailable("worker gone").ToString(), "UNAVAILABLE: worker gone");
  EXPECT_EQ(Cancelled("x").WithContext("request 3").message(), "request 3: x");
  EXPECT_STREQ(StatusCodeName(StatusCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
}

}  // namespace
}  // namespace tediserve
