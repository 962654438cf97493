// A gRPC callback that drops the last reference to its channel must not bring the process down
// (peering/grpc_callback_threads.h). Without the pin, each round aborts about half the time
// with a double free on gRPC's callback thread; ctest runs this test in a process of its own, so
// no other gRPC object holds the callback queue for it.
#include "peering/grpc_callback_threads.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"

namespace pgfleet::peering {
namespace {

struct Call {
  grpc::ClientContext context;
  v1::ForwardCancelRequest request;
  v1::ForwardCancelReply reply;
  absl::Notification done;
  grpc::StatusCode code = grpc::StatusCode::OK;
};

TEST(GrpcCallbackThreadsTest, CallbackThatDropsTheLastChannelReferenceIsSafe) {
  PinGrpcCallbackThreads();
  for (int round = 0; round < 8; ++round) {
    auto call = std::make_shared<Call>();
    auto test_released_call = std::make_shared<absl::Notification>();
    {
      // Nobody listens there: the call fails at once, on a callback thread.
      auto stub = v1::Peering::NewStub(grpc::CreateChannel(
          "unix:/nonexistent/pgfleet-unit-test.sock", grpc::InsecureChannelCredentials()));
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      stub->async()->ForwardCancel(&call->context, &call->request, &call->reply,
                                   [call, test_released_call](grpc::Status status) {
                                     call->code = status.error_code();
                                     call->done.Notify();
                                     // Return (and drop the call) only after the test dropped
                                     // its copy, so the last reference goes on this thread.
                                     test_released_call->WaitForNotification();
                                   });
    }  // the stub is gone: the call's context holds the channel's last reference
    std::weak_ptr<Call> watched = call;
    std::shared_ptr<Call> waiting = std::move(call);
    ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(waiting->code, grpc::StatusCode::UNAVAILABLE);
    waiting.reset();
    test_released_call->Notify();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!watched.expired() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    ASSERT_TRUE(watched.expired()) << "the callback never released its call";
    // The callback thread polls its queue again right after releasing the call.
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace
}  // namespace pgfleet::peering
