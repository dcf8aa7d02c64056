/* copy.h - memory copies for the data paths.
 *
 * wf_copy is memcpy without one trap: glibc's memcpy (rep movsb) runs many
 * times slower on AMD Zen CPUs with FSRM when the destination sits 1-31
 * bytes past the source modulo 64 and the copy is mid-sized (from a few KiB
 * to a few hundred; see bench/NOTES.md, "Misaligned copies on Zen"). User
 * buffers, malloc'd results and 4 KiB-aligned shared slots meet at every
 * offset, so every copy of collective data goes through here: relatively
 * misaligned copies of 1 KiB and more take a vector loop, the rest memcpy.
 *
 * wf_copy_nt returns this CPU's streaming (non-temporal) copy, or NULL.
 *
 * wf_zero is memset(p, 0, n) that stays a call to libc: GCC turns a
 * memset of a few hundred constant bytes into rep stos, whose start costs
 * more on AMD Zen than libc's vector stores take for the whole. */
#ifndef WF_UTIL_COPY_H
#define WF_UTIL_COPY_H
#include <stddef.h>

typedef void (*wf_copy_fn)(void *dst, const void *src, size_t n);

void wf_copy(void *dst, const void *src, size_t n);
wf_copy_fn wf_copy_nt(void);
/* Every vector copy this CPU can run, whichever wf_copy and wf_copy_nt
 * pick (for tests: an AVX2 machine still checks the SSE2 loops); returns
 * how many of max were filled. */
int wf_copy_variants(const char **names, wf_copy_fn *fns, int max);
void wf_zero(void *p, size_t n);

#endif
