// StreamOrder; see stream_order.h.
#include "stream_order.h"

#include <c10/util/Exception.h>

namespace ranktime::c10d {

StreamOrder::StreamOrder(c10::Device device)
    : impl_(c10::impl::getDeviceGuardImpl(device.type())), stream_(impl_->getStream(device)) {
  TORCH_INTERNAL_ASSERT(device.is_cuda(), "StreamOrder on ", device);
}

StreamOrder::~StreamOrder() {
  if (event_) impl_->destroyEvent(event_, stream_.device_index());
}

void* StreamOrder::ready_event() {
  // c10::Event of torch 1.13 does not expose its cudaEvent_t; the guard's own record() does (it
  // creates the event on first use, timing disabled, as c10::Event would).
  if (!event_) {
    impl_->record(&event_, stream_, stream_.device_index(), c10::EventFlag::PYTORCH_DEFAULT);
  }
  return event_;
}

}  // namespace ranktime::c10d
