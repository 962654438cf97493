// The pin is a started server with a callback service: such a server holds a reference on the
// callback completion queue until it is destroyed, and this one never is.
#include "peering/grpc_callback_threads.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

namespace pgfleet::peering {

void PinGrpcCallbackThreads() {
  [[maybe_unused]] static grpc::Server* const pin = [] {
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(new grpc::CallbackGenericService());
    return builder.BuildAndStart().release();
  }();
}

}  // namespace pgfleet::peering
