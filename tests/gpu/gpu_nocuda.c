/* gpu_nocuda.c - bad device input where CUDA cannot be used (issue 23, item
 * 5), through the public API in a job of one (no launcher): a CUDA tensor
 * fails at submission with an error naming the tensor and the reason, and
 * nothing crashes. One case per process (the device registry answers the
 * same every time in a process):
 *   missing     WEFT_CUDA_LIBRARY names a file that does not exist: the
 *               error names the tensor and why CUDA cannot be used (that
 *               path and dlerror's reason, or, where another libcudart is
 *               found, the runtime's own reason); weft_device_available
 *               says the same;
 *   old_driver  WEFT_CUDA_LIBRARY is fake_cudart (driver too old): the error
 *               names the tensor and the runtime's text;
 *   fake        fake_cudart working: a host pointer marked CUDA is an error
 *               naming the tensor; an allreduce of fake device memory gives
 *               the right result, also when pinned memory cannot be
 *               allocated (no_pinned: the staging pool is ordinary memory
 *               then), and a host allreduce after them succeeds.
 * Usage: gpu_nocuda CASE [FAKE_LIBRARY]. Exit 0 on success. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

static int g_fail;
#define CHECK(cond, ...)                   \
  do {                                     \
    if (!(cond)) {                         \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fprintf(stderr, "\n");               \
      g_fail = 1;                          \
    }                                      \
  } while (0)

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* allreduce of n floats at data on CUDA device 0, named name; the status. */
static weft_status cuda_allreduce(weft_world *w, const char *name, float *data, int64_t n, char *msg, size_t len) {
  int64_t shape[1] = {n};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, data, 0, WEFT_DEVICE_KIND_CUDA, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(weft_world_group(w), name, &t, &t, WEFT_OP_SUM, NULL, &req);
  snprintf(msg, len, "%s", st == WEFT_OK ? "" : weft_last_error());
  if (st == WEFT_OK) {
    st = weft_wait(req, 30);
    snprintf(msg, len, "%s", weft_request_error(req));
    weft_request_free(req);
  }
  return st;
}

static int host_allreduce_ok(weft_world *w) {
  float x[3] = {1, 2, 3};
  int64_t shape[1] = {3};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(weft_world_group(w), "host.after", &t, &t, WEFT_OP_SUM, NULL, &req);
  if (st == WEFT_OK) st = weft_wait(req, 30);
  if (req) weft_request_free(req);
  return st == WEFT_OK && x[2] == 3;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_nocuda missing|old_driver|fake [FAKE_LIBRARY]\n");
    return 2;
  }
  const char *c = argv[1];
  const char *missing = "/nonexistent/weft-test/libcudart.so.99";
  if (!strcmp(c, "missing")) setenv("WEFT_CUDA_LIBRARY", missing, 1);
  else if (argc > 2) setenv("WEFT_CUDA_LIBRARY", argv[2], 1);
  if (!strcmp(c, "old_driver")) setenv("FAKE_CUDART_MODE", "old_driver", 1);
  else setenv("FAKE_CUDART_MODE", "ok", 1);
  weft_world *w = NULL;
  if (weft_init(NULL, &w) != WEFT_OK) {
    fprintf(stderr, "FAIL: weft_init: %s\n", weft_last_error());
    return 1;
  }
  char msg[2048];
  float buf[4] = {1, 2, 3, 4};
  if (!strcmp(c, "missing") || !strcmp(c, "old_driver")) {
    weft_status st = cuda_allreduce(w, "grad.w", buf, 4, msg, sizeof msg);
    printf("%s: %s: %s\n", c, weft_status_string(st), msg);
    int avail = weft_device_available(WEFT_DEVICE_KIND_CUDA, NULL);
    if (!strcmp(c, "missing") && st == WEFT_OK) {
      printf("missing: a libcudart was found after WEFT_CUDA_LIBRARY (a CUDA machine): not this case\n");
    } else {
      CHECK(st == WEFT_ERR_NOT_SUPPORTED, "a CUDA tensor without CUDA: %s", weft_status_string(st));
      CHECK(has(msg, "'grad.w'") && has(msg, "input tensor") && has(msg, "cuda:0"), "the tensor is not named: %s",
            msg);
      if (!strcmp(c, "missing"))
        CHECK((has(msg, missing) && has(msg, "No such file")) || has(msg, "loaded, but"),
              "the reason (library not found, or the runtime's) is missing: %s", msg);
      else
        CHECK(has(msg, "driver version is insufficient") && has(msg, "CUDA error 35") && has(msg, "fake_cudart") &&
                  has(msg, "driver version 11.2"),
              "the reason (driver too old, from the fake runtime) is missing: %s", msg);
      CHECK(avail == WEFT_ERR_NOT_SUPPORTED, "weft_device_available: %s", weft_status_string(avail));
    }
    CHECK(buf[3] == 4, "the tensor was touched");
    CHECK(host_allreduce_ok(w), "a host allreduce after the failure");
  } else if (!strcmp(c, "fake")) {
    int n = 0;
    CHECK(weft_device_available(WEFT_DEVICE_KIND_CUDA, &n) == WEFT_OK && n == 1, "fake CUDA: %s", weft_last_error());
    /* a host pointer marked CUDA: an error naming the tensor, no crash */
    weft_status st = cuda_allreduce(w, "host.as.cuda", buf, 4, msg, sizeof msg);
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT && has(msg, "'host.as.cuda'"), "a host pointer marked CUDA: %s: %s",
          weft_status_string(st), msg);
    /* the fake's device memory (its cudaMalloc: the library weft loaded) works */
    void *lib = argc > 2 ? dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *sym = lib ? dlsym(lib, "cudaMalloc") : NULL;
    int (*fake_malloc)(void **, size_t);
    memcpy(&fake_malloc, &sym, sizeof sym);
    void *d = NULL;
    if (!sym || fake_malloc(&d, sizeof buf) != 0) {
      fprintf(stderr, "FAIL: the fake runtime is not loaded from %s\n", argc > 2 ? argv[2] : "(none given)");
      return 1;
    }
    /* pinned memory that cannot be allocated (the staging pool is made at
     * the first device operation): not an abort, and not even a failure:
     * the pool falls back to ordinary memory, with a warning */
    setenv("FAKE_CUDART_MODE", "no_pinned", 1);
    memcpy(d, buf, sizeof buf);
    st = cuda_allreduce(w, "no.pinned", d, 4, msg, sizeof msg);
    printf("no_pinned: %s: %s\n", weft_status_string(st), msg);
    CHECK(st == WEFT_OK && ((float *)d)[3] == 4, "pinned memory that cannot be allocated: %s: %s",
          weft_status_string(st), msg);
    setenv("FAKE_CUDART_MODE", "ok", 1);
    memcpy(d, buf, sizeof buf);
    st = cuda_allreduce(w, "fake.ok", d, 4, msg, sizeof msg);
    CHECK(st == WEFT_OK && ((float *)d)[3] == 4, "an allreduce on fake CUDA memory: %s: %s", weft_status_string(st),
          msg);
    CHECK(host_allreduce_ok(w), "a host allreduce after the device ones");
    void *fsym = dlsym(lib, "cudaFree");
    int (*fake_free)(void *);
    memcpy(&fake_free, &fsym, sizeof fsym);
    if (fake_free) fake_free(d);
    dlclose(lib);
  } else {
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
  }
  CHECK(weft_finalize(w) == WEFT_OK, "finalize: %s", weft_last_error());
  if (!g_fail) printf("PASS %s\n", c);
  return g_fail;
}
