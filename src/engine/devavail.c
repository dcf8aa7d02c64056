/* devavail.c - whether a device kind's backend loads here
 * (wf_submit_device_available, behind weft_device_available: the Python
 * package's cuda_built(), tools, tests that skip without a GPU). */
#include <stddef.h>

#include "device/device.h"
#include "engine/submit.h"
#include "util/err.h"

weft_status wf_submit_device_available(int device_kind, int *count) {
  if (count) *count = 0;
  wf_device_kind k;
  switch (device_kind) {
    case WEFT_DEVICE_KIND_AUTO:
    case WEFT_DEVICE_KIND_CUDA: k = WF_DEVICE_CUDA; break;
    case WEFT_DEVICE_KIND_SIM: k = WF_DEVICE_SIM; break;
    default:
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_device_available: unknown device_kind %d (WEFT_DEVICE_KIND_*)",
                    device_kind);
  }
  wf_device *d = NULL;
  weft_status st = wf_device_get(k, &d);
  if (st != WEFT_OK) return st; /* the registry's message: why it cannot be made */
  wf_device_info info = {0};
  if ((st = d->ops->info(d, &info)) != WEFT_OK) return st;
  if (info.count < 1)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "%s device: no device visible", wf_device_kind_name(k));
  if (count) *count = info.count;
  return WEFT_OK;
}
