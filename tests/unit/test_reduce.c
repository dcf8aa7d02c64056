/* test_reduce.c - unit test of src/reduce: wf_reduce / wf_reduce3 for every
 * dtype x op (aliased buffers too, count 0, invalid arguments), known
 * values, and the float16 / bfloat16 conversions, against the scalar
 * reference of test_reduce_common.h; concurrent float16 reductions while the
 * F16C hook flips. The float16 suites run twice, with F16C allowed and
 * forbidden, so the hardware and software paths must both match the
 * reference. wf_scale / wf_scale_copy: test_reduce_scale.c.
 *
 * `test_reduce --exhaustive` also checks all 2^32 float32 -> float16 and
 * bfloat16 conversions (a few minutes; not run by ctest). */
#include "test_reduce_common.h"

/* --------------------------------------------------- reduce checking */
/* all_forms: 0 = only reduce3(d,a,b) and reduce(d,b) (large counts), 1 = every
 * aliasing form too. */
static void check_reduce(weft_dtype t, weft_reduce_op op, size_t n, size_t off, int all_forms) {
  size_t sz = DT[t].size, bytes = n * sz;
  buf_t a = buf_new(bytes, off), b = buf_new(bytes, off), d = buf_new(bytes, off);
  unsigned char *a0 = xmalloc(bytes), *b0 = xmalloc(bytes), *want = xmalloc(bytes), *want_aa = xmalloc(bytes);
  fill(t, a.p, n);
  fill(t, b.p, n);
  memcpy(a0, a.p, bytes);
  memcpy(b0, b.p, bytes);
  for (size_t i = 0; i < n; i++) {
    ref_elem(t, op, a0 + i * sz, b0 + i * sz, want + i * sz);
    ref_elem(t, op, a0 + i * sz, a0 + i * sz, want_aa + i * sz);
  }

  wf_reduce3(t, op, d.p, a.p, b.p, n);
  expect_elems(t, OPN[op], "reduce3(d,a,b)", n, d.p, want, a0, b0, __FILE__, __LINE__);
  EXPECT(!memcmp(a.p, a0, bytes) && !memcmp(b.p, b0, bytes), "%s %s reduce3 wrote its inputs", DT[t].name, OPN[op]);

  memcpy(d.p, a0, bytes);
  wf_reduce(t, op, d.p, b.p, n);
  expect_elems(t, OPN[op], "reduce(d=a,b)", n, d.p, want, a0, b0, __FILE__, __LINE__);

  if (all_forms) {
    memcpy(d.p, b0, bytes);
    wf_reduce3(t, op, d.p, a.p, d.p, n);
    expect_elems(t, OPN[op], "reduce3(d,a,d)", n, d.p, want, a0, b0, __FILE__, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce3(t, op, d.p, d.p, b.p, n);
    expect_elems(t, OPN[op], "reduce3(d,d,b)", n, d.p, want, a0, b0, __FILE__, __LINE__);

    memset(d.p, 0x5A, bytes);
    wf_reduce3(t, op, d.p, a.p, a.p, n);
    expect_elems(t, OPN[op], "reduce3(d,a,a)", n, d.p, want_aa, a0, a0, __FILE__, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce3(t, op, d.p, d.p, d.p, n);
    expect_elems(t, OPN[op], "reduce3(d,d,d)", n, d.p, want_aa, a0, a0, __FILE__, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce(t, op, d.p, d.p, n);
    expect_elems(t, OPN[op], "reduce(d,d)", n, d.p, want_aa, a0, a0, __FILE__, __LINE__);
  }
  EXPECT(buf_guards_ok(&a, off) && buf_guards_ok(&b, off) && buf_guards_ok(&d, off),
         "%s %s n=%zu off=%zu: wrote outside the buffer", DT[t].name, OPN[op], n, off);
  free(a.raw), free(b.raw), free(d.raw), free(a0), free(b0), free(want), free(want_aa);
}

/* only_half: just float16, without the largest count (the rerun through
 * the software path). The largest count runs one op per dtype, in turn, so
 * every op meets it (the loop structure is shared by all ops of a dtype);
 * a Debug+ASan build would otherwise take minutes. */
static void suite_reduce_random(int only_half) {
  static const size_t counts[] = {1, 7, 8, 63, 64, 65, 1000, 10007};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    if (only_half && t != WEFT_DTYPE_FLOAT16) continue;
    for (int op = 0; op < WEFT_OP_COUNT_; op++) {
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) /* aligned and odd addresses */
        for (size_t off = counts[c] > 1000 ? 3 : 0; off < 4; off += 3)
          check_reduce((weft_dtype)t, (weft_reduce_op)op, counts[c], off, 1);
      if (!only_half && op == t % WEFT_OP_COUNT_) check_reduce((weft_dtype)t, (weft_reduce_op)op, BIG_COUNT, 1, 0);
    }
  }
}

static void suite_count_zero(void) {
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++)
    for (int op = 0; op < WEFT_OP_COUNT_; op++) {
      unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 9, 9, 9, 9, 9, 9, 9};
      wf_reduce((weft_dtype)t, (weft_reduce_op)op, NULL, NULL, 0);
      wf_reduce3((weft_dtype)t, (weft_reduce_op)op, NULL, NULL, NULL, 0);
      wf_reduce((weft_dtype)t, (weft_reduce_op)op, x, y, 0);
      wf_reduce3((weft_dtype)t, (weft_reduce_op)op, x, y, y, 0);
      wf_scale((weft_dtype)t, NULL, 0, 0.5);
      wf_scale_copy((weft_dtype)t, x, y, 0, 0.5);
      EXPECT(x[0] == 1 && x[7] == 8, "%s %s count 0 wrote", DT[t].name, OPN[op]);
    }
  /* an invalid dtype or op (a bug in the caller) warns and writes nothing */
  unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  wf_reduce(WEFT_DTYPE_COUNT_, WEFT_OP_SUM, x, y, 8);
  wf_reduce3(WEFT_DTYPE_INT8, WEFT_OP_COUNT_, x, y, y, 8);
  wf_scale(WEFT_DTYPE_COUNT_, x, 8, 0.5);
  EXPECT(x[0] == 1 && x[7] == 8, "invalid dtype/op wrote");
}

/* ------------------------------------------------- known-value checks */
/* One element through wf_reduce3; the inputs are given as raw bit patterns. */
static uint64_t red1(weft_dtype t, weft_reduce_op op, uint64_t a, uint64_t b) {
  unsigned char pa[8], pb[8], pd[8];
  store_u(t, pa, a);
  store_u(t, pb, b);
  wf_reduce3(t, op, pd, pa, pb, 1);
  return elem_hex(t, pd);
}
#define KNOWN(t, op, a, b, want)                                                                     \
  do {                                                                                               \
    uint64_t got_ = red1(t, op, (uint64_t)(a), (uint64_t)(b));                                       \
    EXPECT(got_ == (uint64_t)(want), "%s %s(%s, %s) = 0x%llx, want %s", DT[t].name, OPN[op], #a, #b, \
           (unsigned long long)got_, #want);                                                         \
  } while (0)

static void suite_known(void) {
  /* integer wrap */
  KNOWN(WEFT_DTYPE_INT32, WEFT_OP_SUM, INT32_MAX, 1, 0x80000000u);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_SUM, 100, 100, 0xC8); /* -56 */
  KNOWN(WEFT_DTYPE_UINT8, WEFT_OP_AVERAGE, 200, 100, 44);
  KNOWN(WEFT_DTYPE_INT16, WEFT_OP_PRODUCT, 300, 300, 24464);
  KNOWN(WEFT_DTYPE_UINT16, WEFT_OP_PRODUCT, 65535, 65535, 1);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_PRODUCT, 16, 16, 0);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_SUM, INT64_MIN, -1, INT64_MAX);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_PRODUCT, INT64_MIN, -1, INT64_MIN);
  KNOWN(WEFT_DTYPE_INT32, WEFT_OP_PRODUCT, 65536, 65536, 0);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_MIN, -128, 127, 0x80);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_MAX, -1, 1, 1);
  KNOWN(WEFT_DTYPE_UINT8, WEFT_OP_MAX, 0, 255, 255);
  KNOWN(WEFT_DTYPE_INT16, WEFT_OP_MIN, -32768, 32767, 0x8000);
  KNOWN(WEFT_DTYPE_UINT16, WEFT_OP_MIN, 65535, 1, 1);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_MAX, INT64_MIN, -5, -5);
  /* bool */
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_SUM, 2, 0, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_SUM, 0, 0, 0);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MAX, 0, 128, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_PRODUCT, 255, 3, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MIN, 0, 5, 0);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MIN, 7, 7, 1);
  /* float32 / float64: NaN, inf, signed zeros */
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, f32b(INFINITY), f32b(1.0f), f32b(INFINITY));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, f32b(3.4028234663852886e38f), f32b(3.4028234663852886e38f), f32b(INFINITY));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, f32b(-0.0f), f32b(0.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, f32b(0.0f), f32b(-0.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, f32b(-0.0f), f32b(0.0f), 0);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, f32b(0.0f), f32b(-0.0f), 0);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MIN, f64b(-0.0), f64b(0.0), 0x8000000000000000ull);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MAX, f64b(0.0), f64b(-0.0), 0);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MAX, f64b(-INFINITY), f64b(-1e300), f64b(-1e300));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, f32b(0.0f), f32b(-2.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, 0x00000001u, f32b(0.5f), 0); /* ties to even */
  /* NaN in either position of every float op gives NaN */
  static const struct {
    weft_dtype t;
    uint64_t qnan, snan, one, inf;
  } fv[4] = {{WEFT_DTYPE_FLOAT16, 0x7e00, 0xfc01, 0x3c00, 0x7c00},
             {WEFT_DTYPE_BFLOAT16, 0x7fc0, 0xff81, 0x3f80, 0x7f80},
             {WEFT_DTYPE_FLOAT32, 0x7fc00000, 0xff800001, 0x3f800000, 0x7f800000},
             {WEFT_DTYPE_FLOAT64, 0x7ff8000000000000, 0xfff0000000000001, 0x3ff0000000000000, 0x7ff0000000000000}};
  for (int k = 0; k < 4; k++) {
    weft_dtype t = fv[k].t;
    uint64_t other[3] = {fv[k].one, fv[k].inf, 0};
    for (int op = 0; op < WEFT_OP_COUNT_; op++)
      for (int j = 0; j < 3; j++) {
        unsigned char r1[8], r2[8], r3[8];
        store_u(t, r1, red1(t, (weft_reduce_op)op, fv[k].qnan, other[j]));
        store_u(t, r2, red1(t, (weft_reduce_op)op, other[j], fv[k].qnan));
        store_u(t, r3, red1(t, (weft_reduce_op)op, fv[k].snan, other[j]));
        EXPECT(elem_isnan(t, r1) && elem_isnan(t, r2) && elem_isnan(t, r3),
               "%s %s with NaN operand (other 0x%llx) not NaN", DT[t].name, OPN[op], (unsigned long long)other[j]);
      }
  }
  /* float16: computed in float32, rounded back to nearest even */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x7bff, 0x7bff, 0x7c00);     /* 65504 + 65504 = inf */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x3c00, 0x1000, 0x3c00);     /* 1 + 2^-11: tie, to even */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x3c01, 0x1000, 0x3c02);     /* tie, to even (up) */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x0001, 0x0001, 0x0002);     /* subnormals */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_PRODUCT, 0x0001, 0x3800, 0x0000); /* 2^-25: tie to 0 */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_PRODUCT, 0x0003, 0x3800, 0x0002); /* 1.5 ulp: tie to 2 */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MIN, 0x8000, 0x0000, 0x8000);
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MAX, 0x8000, 0x0000, 0x0000);
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MAX, 0xfc00, 0xfbff, 0xfbff);
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x3f80, 0x3b80, 0x3f80); /* 1 + 2^-8: tie, to even */
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x3f81, 0x3b80, 0x3f82);
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x7f7f, 0x7f7f, 0x7f80);     /* max + max = inf */
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_PRODUCT, 0x3fc0, 0x3fc0, 0x4010); /* 1.5 * 1.5 = 2.25 */
}

/* ---------------------------------------------------- conversions */
static void suite_conversions(int exhaustive) {
  g_ctx = "conversions";
  /* known bit patterns */
  EXPECT(wf_f16_to_f32(0x3c00) == 1.0f, "f16 0x3C00 != 1.0");
  EXPECT(wf_f16_to_f32(0x7bff) == 65504.0f, "f16 0x7BFF != 65504");
  EXPECT(wf_f16_to_f32(0x7c00) == INFINITY, "f16 0x7C00 != inf");
  EXPECT(wf_f16_to_f32(0xfc00) == -INFINITY, "f16 0xFC00 != -inf");
  EXPECT(wf_f16_to_f32(0x0001) == 0x1p-24f, "f16 0x0001 != 2^-24");
  EXPECT(fbits(wf_f16_to_f32(0x8000)) == 0x80000000u, "f16 0x8000 != -0");
  EXPECT(isnan(wf_f16_to_f32(0x7c01)) && isnan(wf_f16_to_f32(0xfe00)), "f16 NaN not NaN");
  EXPECT(wf_f32_to_f16(1.0f) == 0x3c00, "1.0 -> 0x%04x", wf_f32_to_f16(1.0f));
  EXPECT(wf_f32_to_f16(65504.0f) == 0x7bff, "65504 -> 0x%04x", wf_f32_to_f16(65504.0f));
  EXPECT(wf_f32_to_f16(65519.996f) == 0x7bff, "65519.996 -> 0x%04x", wf_f32_to_f16(65519.996f));
  EXPECT(wf_f32_to_f16(65520.0f) == 0x7c00, "65520 -> 0x%04x (tie must go to inf)", wf_f32_to_f16(65520.0f));
  EXPECT(wf_f32_to_f16(1e10f) == 0x7c00 && wf_f32_to_f16(-1e10f) == 0xfc00, "overflow not inf");
  EXPECT(wf_f32_to_f16(INFINITY) == 0x7c00, "inf -> 0x%04x", wf_f32_to_f16(INFINITY));
  EXPECT(wf_f32_to_f16(0x1p-24f) == 0x0001, "2^-24 -> 0x%04x", wf_f32_to_f16(0x1p-24f));
  EXPECT(wf_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 -> 0x%04x (tie to even 0)", wf_f32_to_f16(0x1p-25f));
  EXPECT(wf_f32_to_f16(bitsf(0x33000001u)) == 0x0001, "2^-25+ -> 0x%04x", wf_f32_to_f16(bitsf(0x33000001u)));
  EXPECT(wf_f32_to_f16(-0x1p-26f) == 0x8000, "-2^-26 -> 0x%04x", wf_f32_to_f16(-0x1p-26f));
  EXPECT(wf_f32_to_f16(0x1.ffcp-15f) == 0x0400, "subnormal rounding up to min normal");
  EXPECT(h_isnan(wf_f32_to_f16(NAN)) && h_isnan(wf_f32_to_f16(bitsf(0x7f800001u))), "NaN -> not NaN");
  EXPECT(wf_f32_to_bf16(1.0f) == 0x3f80 && wf_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
  EXPECT(wf_f32_to_bf16(bitsf(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
  EXPECT(wf_f32_to_bf16(bitsf(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
  EXPECT(wf_f32_to_bf16(3.4028234663852886e38f) == 0x7f80, "bf16 FLT_MAX rounds to inf");
  EXPECT(bf_isnan(wf_f32_to_bf16(bitsf(0x7f800001u))), "bf16 sNaN with low payload must stay NaN");

  /* every float16 / bfloat16 pattern: to float32 and back */
  uint16_t *h = xmalloc(65536 * 2), *h2 = xmalloc(65536 * 2);
  float *f = xmalloc(65536 * 4), *fsw = xmalloc(65536 * 4);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (uint32_t i = 0; i < 65536; i++) {
    float v = wf_f16_to_f32(h[i]);
    double want = ref_h2d(h[i]);
    uint16_t back = wf_f32_to_f16(v);
    if (h_isnan(h[i]))
      EXPECT(isnan(v) && !signbit(v) == !signbit(want) && h_isnan(back) && (back & 0x8000) == (h[i] & 0x8000),
             "f16 NaN 0x%04x -> 0x%08x -> 0x%04x", h[i], fbits(v), back);
    else
      EXPECT((double)v == want && !signbit(v) == !signbit(want) && back == h[i], "f16 0x%04x -> %a -> 0x%04x", h[i],
             (double)v, back);
    float bv = wf_bf16_to_f32(h[i]);
    double bwant = ref_bf2d(h[i]);
    uint16_t bback = wf_f32_to_bf16(bv);
    if (bf_isnan(h[i]))
      EXPECT(isnan(bv) && bf_isnan(bback) && (bback & 0x8000) == (h[i] & 0x8000), "bf16 NaN 0x%04x", h[i]);
    else
      EXPECT((double)bv == bwant && !signbit(bv) == !signbit(bwant) && bback == h[i], "bf16 0x%04x -> %a -> 0x%04x",
             h[i], (double)bv, bback);
  }
  /* float16 block conversions, both paths, agree with the scalar ones bit
   * for bit (NaNs included: both quiet them the same way) */
  for (int hw = 1; hw >= 0; hw--) {
    wf_half_allow_hw(hw);
    wf_f16_to_f32_block(f, h, 65536);
    wf_f32_to_f16_block(h2, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
      EXPECT(fbits(f[i]) == fbits(wf_f16_to_f32(h[i])), "f16 block (hw=%d) 0x%04x -> 0x%08x", wf_half_hw_active(), h[i],
             fbits(f[i]));
      EXPECT(h2[i] == wf_f32_to_f16(f[i]), "f16 block back (hw=%d) 0x%08x -> 0x%04x", wf_half_hw_active(), fbits(f[i]),
             h2[i]);
    }
  }
  wf_half_allow_hw(1);

  /* short blocks (the F16C tail) stay inside their buffers, at odd addresses */
  for (size_t n = 0; n <= 19; n++) {
    for (int hw = 1; hw >= 0; hw--) {
      wf_half_allow_hw(hw);
      buf_t hb = buf_new(n * 2, 1), fb = buf_new(n * 4, 0);
      wf_f16_to_f32_block((float *)(void *)fb.p, (const wf_u16u *)(h + 0x3bf0), n);
      for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, fb.p + 4 * i, 4);
        EXPECT(v == wf_f16_to_f32((uint16_t)(0x3bf0 + i)), "f16 block n=%zu hw=%d elem %zu", n, hw, i);
      }
      wf_f32_to_f16_block((wf_u16u *)(void *)hb.p, (const float *)(const void *)fb.p, n);
      EXPECT(n == 0 || !memcmp(hb.p, h + 0x3bf0, n * 2), "f16 block back n=%zu hw=%d", n, hw);
      EXPECT(buf_guards_ok(&hb, 1) && buf_guards_ok(&fb, 0), "f16 block n=%zu hw=%d wrote outside", n, hw);
      free(hb.raw), free(fb.raw);
    }
  }
  wf_half_allow_hw(1);

  /* float32 -> 16 bits on random patterns (and all, with --exhaustive):
   * scalar against the reference, blocks (hw and sw) against the scalar */
  uint64_t total = exhaustive ? (1ull << 32) : (1ull << 21);
  for (uint64_t base = 0; base < total; base += 65536) {
    for (uint32_t i = 0; i < 65536; i++) {
      uint32_t u = exhaustive ? (uint32_t)(base + i) : (uint32_t)rnd();
      if (!exhaustive && (i & 3) == 0) u = (u & 0x80ffffffu) | ((100u + (u >> 24) % 45u) << 23); /* f16 range */
      fsw[i] = bitsf(u);
    }
    for (uint32_t i = 0; i < 65536; i++) {
      float v = fsw[i];
      uint16_t got = wf_f32_to_f16(v), want = ref_d2h(v);
      if (isnan(v))
        EXPECT(h_isnan(got) && (got & 0x8000) == (want & 0x8000), "f32 NaN 0x%08x -> 0x%04x", fbits(v), got);
      else
        EXPECT(got == want, "f32 0x%08x -> f16 0x%04x, want 0x%04x", fbits(v), got, want);
      got = wf_f32_to_bf16(v), want = ref_d2bf(v);
      if (isnan(v))
        EXPECT(bf_isnan(got) && (got & 0x8000) == (want & 0x8000), "f32 NaN 0x%08x -> bf16 0x%04x", fbits(v), got);
      else
        EXPECT(got == want, "f32 0x%08x -> bf16 0x%04x, want 0x%04x", fbits(v), got, want);
    }
    for (int hw = 1; hw >= 0; hw--) {
      wf_half_allow_hw(hw);
      wf_f32_to_f16_block(h2, fsw, 65536);
      for (uint32_t i = 0; i < 65536; i++)
        EXPECT(h2[i] == wf_f32_to_f16(fsw[i]), "f16 block (hw=%d) 0x%08x -> 0x%04x", hw, fbits(fsw[i]), h2[i]);
    }
    wf_half_allow_hw(1);
    if (g_failures > 40) break;
  }
  free(h), free(h2), free(f), free(fsw);
}

/* ------------------------------------------------------- threads */
/* One thread reduces float16 while another flips the F16C hook: both
 * paths give the same bits, so every result must match. (TSan checks the
 * hook and the CPU probe are race-free.) */
typedef struct {
  const uint16_t *a, *b, *want;
  size_t n;
  int bad;
} thr_arg;

static void *thr_reduce(void *p) {
  thr_arg *x = p;
  uint16_t *d = xmalloc(x->n * 2);
  for (int it = 0; it < 40; it++) {
    wf_reduce3(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, d, x->a, x->b, x->n);
    if (memcmp(d, x->want, x->n * 2)) x->bad++;
  }
  free(d);
  return NULL;
}
static void *thr_flip(void *p) {
  (void)p;
  for (int it = 0; it < 2000; it++) wf_half_allow_hw(it & 1);
  wf_half_allow_hw(1);
  return NULL;
}

static void suite_threads(void) {
  g_ctx = "threads";
  size_t n = 4099;
  uint16_t *a = xmalloc(n * 2), *b = xmalloc(n * 2), *want = xmalloc(n * 2);
  fill(WEFT_DTYPE_FLOAT16, (unsigned char *)a, n);
  fill(WEFT_DTYPE_FLOAT16, (unsigned char *)b, n);
  for (size_t i = 0; i < n; i++) { /* no NaN inputs: results compared bytewise */
    if (h_isnan(a[i])) a[i] = 0x3c00;
    if (h_isnan(b[i])) b[i] = 0x4000;
    ref_elem(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, (unsigned char *)(a + i), (unsigned char *)(b + i),
             (unsigned char *)(want + i));
  }
  thr_arg args[2] = {{a, b, want, n, 0}, {a, b, want, n, 0}};
  pthread_t th[3];
  int rc = pthread_create(&th[0], NULL, thr_reduce, &args[0]);
  rc |= pthread_create(&th[1], NULL, thr_reduce, &args[1]);
  rc |= pthread_create(&th[2], NULL, thr_flip, NULL);
  EXPECT(rc == 0, "pthread_create failed");
  if (rc == 0)
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  EXPECT(args[0].bad == 0 && args[1].bad == 0, "concurrent float16 reduce gave wrong results (%d, %d)", args[0].bad,
         args[1].bad);
  free(a), free(b), free(want);
}

int main(int argc, char **argv) {
  int exhaustive = argc > 1 && strcmp(argv[1], "--exhaustive") == 0;
  int hw = reduce_test_begin("test_reduce");
  if (hw < 0) return 1;
  g_ctx = "known values";
  suite_known();
  suite_conversions(exhaustive);
  suite_count_zero();
  g_ctx = "reduce random";
  suite_reduce_random(0);
  if (hw) { /* again through the software float16 path */
    wf_half_allow_hw(0);
    g_ctx = "known values, software f16";
    suite_known();
    g_ctx = "reduce random, software f16";
    suite_reduce_random(1);
    wf_half_allow_hw(1);
  }
  suite_threads();
  return reduce_test_end("test_reduce");
}
