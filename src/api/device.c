/* device.c - weft_device_available (weft.h): whether tensors of a device
 * kind can be used in this process (engine/devavail.c answers). */
#include "engine/submit.h"

weft_status weft_device_available(int device_kind, int *count) {
  return wf_submit_device_available(device_kind, count);
}
