/* fake_cudart.c - a stand-in libcudart for gpu_nocuda.c (tests/gpu): the
 * runtime functions weft's CUDA backend resolves (src/device/dev_cuda.c),
 * over host memory, so the CUDA backend's failure paths run on machines
 * without a GPU. FAKE_CUDART_MODE chooses the behaviour:
 *   old_driver  cudaGetDeviceCount fails with cudaErrorInsufficientDriver;
 *   ok          one device; cudaMalloc hands out host memory it remembers
 *               (the "device memory" cudaPointerGetAttributes reports),
 *               copies are memcpy done at once, events always complete;
 *   no_pinned   as ok, but cudaMallocHost fails (cudaErrorMemoryAllocation).
 * Declarations follow the CUDA runtime API (cudaError_t is an int). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
#define MAX_BLOCKS 256

typedef struct {
  int type, device;
  void *device_pointer, *host_pointer;
} fake_attrs;

static struct {
  char *p;
  size_t len;
  int type; /* 1 pinned, 2 device */
} g_blocks[MAX_BLOCKS];
static _Atomic int g_last; /* set by failing calls on any thread */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* the engine and the caller both allocate */

static const char *mode(void) {
  const char *m = getenv("FAKE_CUDART_MODE");
  return m ? m : "ok";
}

static int remember(void *p, size_t len, int type) {
  pthread_mutex_lock(&g_mu);
  int rc = 2;
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (!g_blocks[i].p) {
      g_blocks[i].p = p;
      g_blocks[i].len = len;
      g_blocks[i].type = type;
      rc = 0;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  return rc;
}
static int forget(void *p) {
  int rc = 1;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (g_blocks[i].p == p) {
      g_blocks[i].p = NULL;
      rc = 0;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  if (!rc) free(p);
  return rc;
}

FAKE_EXPORT int cudaGetDeviceCount(int *n) {
  if (!strcmp(mode(), "old_driver")) {
    *n = 0;
    return g_last = 35;
  }
  *n = 1;
  return 0;
}
FAKE_EXPORT const char *cudaGetErrorString(int e) {
  switch (e) {
    case 0: return "no error";
    case 2: return "out of memory";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    default: return "fake error";
  }
}
FAKE_EXPORT int cudaGetLastError(void) {
  int e = g_last;
  g_last = 0;
  return e;
}
FAKE_EXPORT int cudaRuntimeGetVersion(int *v) {
  *v = 12040;
  return 0;
}
FAKE_EXPORT int cudaDriverGetVersion(int *v) {
  *v = strcmp(mode(), "old_driver") ? 12040 : 11020;
  return 0;
}
FAKE_EXPORT int cudaMallocHost(void **p, size_t len) {
  *p = NULL;
  if (!strcmp(mode(), "no_pinned")) return g_last = 2;
  *p = malloc(len ? len : 1);
  return *p ? remember(*p, len, 1) : 2;
}
FAKE_EXPORT int cudaFreeHost(void *p) { return forget(p); }
FAKE_EXPORT int cudaMalloc(void **p, size_t len) {
  *p = malloc(len ? len : 1);
  return *p ? remember(*p, len, 2) : 2;
}
FAKE_EXPORT int cudaFree(void *p) { return p ? forget(p) : 0; }
FAKE_EXPORT int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream) {
  (void)kind;
  (void)stream;
  memmove(dst, src, len);
  return 0;
}
FAKE_EXPORT int cudaStreamCreateWithFlags(void **s, unsigned flags) {
  (void)flags;
  *s = malloc(1);
  return *s ? 0 : 2;
}
FAKE_EXPORT int cudaStreamDestroy(void *s) {
  free(s);
  return 0;
}
FAKE_EXPORT int cudaEventCreateWithFlags(void **e, unsigned flags) {
  (void)flags;
  *e = malloc(1);
  return *e ? 0 : 2;
}
FAKE_EXPORT int cudaEventDestroy(void *e) {
  free(e);
  return 0;
}
FAKE_EXPORT int cudaEventRecord(void *e, void *s) {
  (void)e;
  (void)s;
  return 0;
}
FAKE_EXPORT int cudaEventQuery(void *e) {
  (void)e;
  return 0;
}
FAKE_EXPORT int cudaStreamWaitEvent(void *s, void *e, unsigned flags) {
  (void)s;
  (void)e;
  (void)flags;
  return 0;
}
FAKE_EXPORT int cudaPointerGetAttributes(fake_attrs *a, const void *p) {
  memset(a, 0, sizeof *a);
  a->device = -2;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < MAX_BLOCKS; i++) {
    char *b = g_blocks[i].p;
    if (b && (const char *)p >= b && (const char *)p < b + (g_blocks[i].len ? g_blocks[i].len : 1)) {
      a->type = g_blocks[i].type;
      a->device = 0;
      a->device_pointer = a->host_pointer = (void *)p;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return 0; /* unregistered host memory, as CUDA 11+ reports it */
}
FAKE_EXPORT int cudaGetDevice(int *d) {
  *d = 0;
  return 0;
}
FAKE_EXPORT int cudaSetDevice(int d) { return d == 0 ? 0 : (g_last = 101); }
