/* copy.c - memory copies for the data paths (see copy.h). */
#include "util/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define LOOP_MIN 1024 /* below this memcpy is fine at any offset */

__attribute__((target("avx2"))) static void copy_avx2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)s), b = _mm256_loadu_si256((const __m256i *)(s + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + 64)), e = _mm256_loadu_si256((const __m256i *)(s + 96));
    _mm256_storeu_si256((__m256i *)d, a);
    _mm256_storeu_si256((__m256i *)(d + 32), b);
    _mm256_storeu_si256((__m256i *)(d + 64), c);
    _mm256_storeu_si256((__m256i *)(d + 96), e);
  }
  memcpy(d, s, n);
}

static void copy_sse2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_storeu_si128((__m128i *)d, a);
    _mm_storeu_si128((__m128i *)(d + 16), b);
    _mm_storeu_si128((__m128i *)(d + 32), c);
    _mm_storeu_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, n);
}

/* Streaming stores bypass the cache: no read-for-ownership of the
 * destination and no eviction of useful lines. The final sfence orders them
 * before later stores (the release stores that publish a completion do not
 * order non-temporal ones). */
__attribute__((target("avx2"))) static void copy_nt_avx2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 31);
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)s), b = _mm256_loadu_si256((const __m256i *)(s + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + 64)), e = _mm256_loadu_si256((const __m256i *)(s + 96));
    _mm256_stream_si256((__m256i *)d, a);
    _mm256_stream_si256((__m256i *)(d + 32), b);
    _mm256_stream_si256((__m256i *)(d + 64), c);
    _mm256_stream_si256((__m256i *)(d + 96), e);
  }
  for (; n >= 32; d += 32, s += 32, n -= 32) _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
  memcpy(d, s, n);
  _mm_sfence();
}

static void copy_nt_sse2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 15);
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  for (; n >= 16; d += 16, s += 16, n -= 16) _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
  memcpy(d, s, n);
  _mm_sfence();
}

static int has_avx2(void) {
  static _Atomic int v; /* 0 unknown, 1 no, 2 yes */
  int x = v;
  if (!x) {
    __builtin_cpu_init();
    v = x = __builtin_cpu_supports("avx2") ? 2 : 1;
  }
  return x == 2;
}

void wf_copy(void *dst, const void *src, size_t n) {
  if (n < LOOP_MIN || !(((uintptr_t)dst - (uintptr_t)src) & 63)) {
    memcpy(dst, src, n);
  } else if (has_avx2()) {
    copy_avx2(dst, src, n);
  } else {
    copy_sse2(dst, src, n);
  }
}

wf_copy_fn wf_copy_nt(void) { return has_avx2() ? copy_nt_avx2 : copy_nt_sse2; }

int wf_copy_variants(const char **names, wf_copy_fn *fns, int max) {
  static const char *const nm[] = {"copy_sse2", "copy_nt_sse2", "copy_avx2", "copy_nt_avx2"};
  const wf_copy_fn fn[] = {copy_sse2, copy_nt_sse2, copy_avx2, copy_nt_avx2};
  int k = 0;
  for (int i = 0; i < (has_avx2() ? 4 : 2) && k < max; i++, k++) {
    names[k] = nm[i];
    fns[k] = fn[i];
  }
  return k;
}

#else

void wf_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
wf_copy_fn wf_copy_nt(void) { return NULL; }
int wf_copy_variants(const char **names, wf_copy_fn *fns, int max) {
  (void)names, (void)fns, (void)max;
  return 0;
}

#endif

void wf_zero(void *p, size_t n) { memset(p, 0, n); }
