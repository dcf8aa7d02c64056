/* test_copy.c - the data-path copies (util/copy.c) against a byte loop:
 * wf_copy, the streaming copy wf_copy_nt (where the CPU has one) and
 * wf_zero, and every vector loop behind them (wf_copy_variants: SSE2 on an
 * AVX2 machine too), for every length up to a few cache lines and lengths around the
 * vector loop's thresholds, at every source and destination offset within
 * a 64-byte line; guard bytes on both sides must stay untouched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit_check.h"
#include "util/copy.h"

#define GUARD 64
#define MAXLEN (70000 + 2 * GUARD + 128)

static uint8_t src[MAXLEN], dst[MAXLEN];

/* One copy of n bytes from src + so to dst + GUARD + doff, checked byte by
 * byte against the pattern it must reproduce and the guards around it. */
static void check_one(const char *name, wf_copy_fn fn, size_t n, size_t so, size_t doff) {
  memset(dst, 0xEE, sizeof dst);
  uint8_t *d = dst + GUARD + doff;
  fn(d, src + so, n);
  for (size_t i = 0; i < n; i++)
    if (d[i] != (uint8_t)((so + i) * 7 + 3)) {
      CHECK(0, "%s: length %zu, source offset %zu, destination offset %zu: byte %zu is %u", name, n, so, doff, i,
            d[i]);
      return;
    }
  for (size_t i = 0; i < GUARD + doff; i++)
    if (dst[i] != 0xEE) {
      CHECK(0, "%s: length %zu offsets %zu/%zu: wrote %zu bytes before the destination", name, n, so, doff,
            GUARD + doff - i);
      return;
    }
  for (size_t i = GUARD + doff + n; i < GUARD + doff + n + GUARD; i++)
    if (dst[i] != 0xEE) {
      CHECK(0, "%s: length %zu offsets %zu/%zu: wrote past the end (byte %zu after it)", name, n, so, doff,
            i - (GUARD + doff + n));
      return;
    }
}

static void check_fn(const char *name, wf_copy_fn fn) {
  static const size_t big[] = {1023, 1024, 1025, 2047, 4096, 4097, 65536 + 31, 70000};
  for (size_t so = 0; so < 64; so += 1)
    for (size_t doff = 0; doff < 64; doff += (so % 8 == 0 ? 1 : 13)) {
      for (size_t n = 0; n <= 300; n += (n < 160 ? 1 : 7)) check_one(name, fn, n, so, doff);
      if (so % 16 == 0 || so == 5 || so == 33)
        for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) check_one(name, fn, big[k], so, doff);
    }
}

int main(void) {
  for (size_t i = 0; i < MAXLEN; i++) src[i] = (uint8_t)(i * 7 + 3);
  check_fn("wf_copy", wf_copy);
  wf_copy_fn nt = wf_copy_nt();
#if defined(__x86_64__)
  CHECK(nt != NULL, "x86-64 has SSE2: wf_copy_nt must not be NULL");
#endif
  if (nt) check_fn("wf_copy_nt", nt);
  /* the loops behind them, each directly: the ones this CPU does not pick
   * (SSE2 on an AVX2 machine) too */
  const char *names[8];
  wf_copy_fn fns[8];
  int nv = wf_copy_variants(names, fns, 8);
#if defined(__x86_64__)
  CHECK(nv >= 2, "x86-64: at least the two SSE2 copies (got %d)", nv);
#endif
  for (int i = 0; i < nv; i++) check_fn(names[i], fns[i]);
  for (size_t n = 0; n < 600; n += 3) {
    memset(dst, 0xEE, sizeof dst);
    wf_zero(dst + GUARD + n % 64, n);
    size_t bad = 0;
    for (size_t i = 0; i < 2 * GUARD + 700; i++) {
      int inside = i >= GUARD + n % 64 && i < GUARD + n % 64 + n;
      if (dst[i] != (inside ? 0 : 0xEE)) bad++;
    }
    CHECK(!bad, "wf_zero of %zu bytes at offset %zu: %zu wrong bytes", n, n % 64, bad);
  }
  return unit_result("test_copy");
}
