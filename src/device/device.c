/* device.c - the registry of device backends (one wf_device per kind per
 * process, made on first use under a lock) and the checks shared by every
 * backend's callers. */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/err.h"

static const char *const k_names[WF_DEVICE_KINDS] = {"cpu", "sim", "cuda"};

/* Per kind: the device, or the status and message of the one failed try
 * (repeated to every later caller, whose thread has its own message). */
static struct {
  int tried;
  weft_status st;
  wf_device *dev;
  char msg[1024];
} g_reg[WF_DEVICE_KINDS];
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;

const char *wf_device_kind_name(wf_device_kind kind) {
  return (unsigned)kind < WF_DEVICE_KINDS ? k_names[kind] : NULL;
}

weft_status wf_device_kind_parse(const char *name, wf_device_kind *out) {
  for (int k = 0; name && k < WF_DEVICE_KINDS; k++)
    if (!strcasecmp(name, k_names[k])) {
      *out = (wf_device_kind)k;
      return WEFT_OK;
    }
  return wf_err(WEFT_ERR_INVALID_ARGUMENT, "unknown device kind '%s' (cpu, sim or cuda)", name ? name : "(null)");
}

weft_status wf_device_get(wf_device_kind kind, wf_device **out) {
  *out = NULL;
  if ((unsigned)kind >= WF_DEVICE_KINDS) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "bad device kind %d", (int)kind);
  pthread_mutex_lock(&g_reg_mu);
  if (!g_reg[kind].tried) {
    wf_device *d = NULL;
    weft_status st = kind == WF_DEVICE_CPU   ? wf_dev_cpu_create(&d)
                     : kind == WF_DEVICE_SIM ? wf_dev_sim_create(&d)
                                             : wf_dev_cuda_create(&d);
    g_reg[kind].tried = 1;
    g_reg[kind].st = st;
    g_reg[kind].dev = st == WEFT_OK ? d : NULL;
    if (st != WEFT_OK) snprintf(g_reg[kind].msg, sizeof g_reg[kind].msg, "%s", wf_err_msg());
  }
  weft_status st = g_reg[kind].st;
  *out = g_reg[kind].dev;
  if (st != WEFT_OK) wf_err(st, "%s", g_reg[kind].msg);
  pthread_mutex_unlock(&g_reg_mu);
  return st;
}

unsigned wf_device_kinds_present(void) {
  unsigned kinds = 1u << WEFT_DEVICE_KIND_SIM;
  pthread_mutex_lock(&g_reg_mu);
  int cuda = g_reg[WF_DEVICE_CUDA].dev != NULL;
  pthread_mutex_unlock(&g_reg_mu);
  if (cuda || wf_dev_cuda_loaded()) kinds |= 1u << WEFT_DEVICE_KIND_CUDA;
  return kinds;
}

void wf_device_shutdown(void) {
  pthread_mutex_lock(&g_reg_mu);
  for (int k = 0; k < WF_DEVICE_KINDS; k++) {
    if (g_reg[k].dev) g_reg[k].dev->ops->destroy(g_reg[k].dev);
    memset(&g_reg[k], 0, sizeof g_reg[k]);
  }
  pthread_mutex_unlock(&g_reg_mu);
}

static const char *mem_name(wf_mem_type t) {
  switch (t) {
    case WF_MEM_HOST: return "host memory";
    case WF_MEM_PINNED: return "pinned host memory";
    case WF_MEM_DEVICE: return "device memory";
    case WF_MEM_MANAGED: return "managed memory";
  }
  return "unknown memory";
}

weft_status wf_device_check_ptr(wf_device *d, const void *p, size_t len, const char *what) {
  const char *dn = d->ops->name;
  if (!p) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: NULL pointer given as %s device memory", what, dn);
  wf_dev_ptr a, b;
  weft_status st = d->ops->pointer(d, p, &a);
  if (st != WEFT_OK) return st;
  if (a.type != WF_MEM_DEVICE && a.type != WF_MEM_MANAGED)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %p is not %s device memory (it is %s)", what, p, dn,
                  mem_name(a.type));
  if (len > 1) {
    const char *last = (const char *)p + (len - 1);
    if ((st = d->ops->pointer(d, last, &b)) != WEFT_OK) return st;
    if (b.type != a.type || b.device != a.device)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %p + %zu bytes runs past the %s device allocation it starts in",
                    what, p, len, dn);
  }
  return WEFT_OK;
}
