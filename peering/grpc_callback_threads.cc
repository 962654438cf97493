// The pin is a started server with a callback service: such a server holds a reference on the
// callback completion queue until it is destroyed, and this one never is.
#include "peering/grpc_callback_threads.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

namespace pgfleet::peering {

void PinGrpcCallbackThreads() {
  static grpc::Server* const pin = [] {
    static auto* const service = new grpc::CallbackGenericService();
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(service);
    return builder.BuildAndStart().release();
  }();
  (void)pin;
}

}  // namespace pgfleet::peering
