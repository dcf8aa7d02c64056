/* fuzz_common.h - helpers shared by the libFuzzer targets in tests/fuzz:
 *  - fz_fail(): report a broken property (abort, so libFuzzer saves the input);
 *  - fz_in: a byte reader over the fuzzer input that never fails (reads
 *    past the end give zeros), for targets that build structured messages;
 *  - seed files: every target can write a small seed corpus built from
 *    valid encodings, so campaigns start from deep states. A target defines
 *    fz_write_seeds(dir) and calls fz_seed_init() from
 *    LLVMFuzzerInitialize(); with WEFT_FUZZ_SEEDS=<dir> in the environment
 *    the target then writes its seeds there and exits 0
 *    (run_fuzzers.sh does this before each campaign).
 * Header-only, everything static: each target is one .c file plus this. */
#ifndef WEFT_FUZZ_COMMON_H
#define WEFT_FUZZ_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_FN static __attribute__((unused))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

FZ_FN __attribute__((noreturn, format(printf, 1, 2))) void fz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz property violated: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

/* ---- structured input */
typedef struct fz_in {
  const uint8_t *p;
  size_t n, off;
} fz_in;

/* The next nbytes (1..8) as a big-endian number; zeros past the end. */
FZ_FN uint64_t fz_take(fz_in *in, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; i++) v = (v << 8) | (in->off < in->n ? in->p[in->off++] : 0);
  return v;
}

/* A NUL-free string of 1..max bytes into dst (max + 1 bytes). */
FZ_FN void fz_take_name(fz_in *in, char *dst, size_t max) {
  size_t len = 1 + (size_t)(fz_take(in, 1) % max);
  for (size_t i = 0; i < len; i++) dst[i] = (char)(1 + fz_take(in, 1) % 255);
  dst[len] = '\0';
}

/* Copies up to n input bytes into dst; returns how many there were. */
FZ_FN size_t fz_take_bytes(fz_in *in, uint8_t *dst, size_t n) {
  size_t k = in->n - in->off < n ? in->n - in->off : n;
  memcpy(dst, in->p + in->off, k);
  in->off += k;
  return k;
}

/* Corrupts buf[0..len) once, as chosen by the input: flip one byte, or put
 * a boundary value (0, all ones, top bit, one past a small length) in a
 * 1-, 2-, 4- or 8-byte little-endian field at any offset, or cut the tail.
 * Returns the new length (a cut shortens it). */
FZ_FN size_t fz_corrupt(fz_in *in, uint8_t *buf, size_t len) {
  if (len == 0) return 0;
  size_t at = (size_t)(fz_take(in, 2) % len);
  unsigned how = (unsigned)(fz_take(in, 1) % 8);
  if (how < 3) {
    buf[at] ^= (uint8_t)(1 + fz_take(in, 1) % 255);
    return len;
  }
  if (how == 7) return at; /* truncated */
  static const int widths[4] = {1, 2, 4, 8};
  int w = widths[fz_take(in, 1) % 4];
  static const uint64_t vals[6] = {0, UINT64_MAX, 1ULL << 63, 0x80000000ULL, 0xffffULL + 1, 256};
  uint64_t v = how == 6 ? (uint64_t)fz_take(in, 1) : vals[(how - 3) * 2 + fz_take(in, 1) % 2];
  for (int i = 0; i < w && at + (size_t)i < len; i++) buf[at + (size_t)i] = (uint8_t)(v >> (8 * i));
  return len;
}

/* ---- seeds */
static const char *fz_seed_dir;
static int fz_seed_count;

/* Writes one seed file <dir>/<name>: the selector byte, then the bytes. */
FZ_FN void fz_seed(const char *name, uint8_t sel, const void *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", fz_seed_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(&sel, 1, 1, f) != 1 || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
    fprintf(stderr, "cannot write seed %s\n", path);
    exit(1);
  }
  fz_seed_count++;
}

/* A deterministic pseudo-random filler for seed inputs of structured modes. */
FZ_FN void fz_fill(uint8_t *p, size_t n, uint64_t s) {
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    p[i] = (uint8_t)(s >> 24);
  }
}

static void fz_write_seeds(void); /* defined by each target */

FZ_FN void fz_seed_init(const char *target) {
  fz_seed_dir = getenv("WEFT_FUZZ_SEEDS");
  if (!fz_seed_dir || !*fz_seed_dir) return;
  fz_write_seeds();
  fprintf(stderr, "%s: wrote %d seed(s) to %s\n", target, fz_seed_count, fz_seed_dir);
  exit(0);
}

#endif
