/* mp_p2p_util.c - what the point-to-point tests share (mp_p2p.c,
 * mp_p2p_fast.c): a 1-d tensor, isend/irecv that fail the test when the call
 * is refused, and the mismatch case (both sides named, then the key works).
 * Included after mp_harness.c. */
static weft_tensor tens(weft_dtype t, int64_t *shape, size_t n, void *data) {
  shape[0] = (int64_t)n;
  weft_tensor x = {t, 1, shape, data, WEFT_DEVICE_CPU, 0, NULL};
  return x;
}

static void isend(weft_group *g, const weft_tensor *t, int dst, uint64_t key, weft_request **r, const char *what) {
  mp_submitted(weft_send(g, t, dst, key, NULL, r), r, what);
}

static void irecv(weft_group *g, const weft_tensor *t, int src, uint64_t key, weft_request **r, const char *what) {
  mp_submitted(weft_recv(g, t, src, key, NULL, r), r, what);
}

/* Rank 0 sends n0 elements of t0, rank 1 expects n1 of t1: both fail naming
 * both sides; then the same key works. path: the case title's prefix. */
static void mismatch_case(const char *path, weft_dtype t0, size_t n0, weft_dtype t1, size_t n1, uint64_t key) {
  mp_case("%smismatch: %zu %s sent, %zu %s expected", path, n0, weft_dtype_name(t0), n1, weft_dtype_name(t1));
  if (mp_rank > 1) {
    mp_case_end();
    return;
  }
  uint8_t buf[64] = {0};
  int64_t s[1];
  weft_tensor t = mp_rank == 0 ? tens(t0, s, n0, buf) : tens(t1, s, n1, buf);
  weft_request *r;
  if (mp_rank == 0) isend(mp_group, &t, 1, key, &r, "send");
  else irecv(mp_group, &t, 0, key, &r, "recv");
  weft_status st = mp_wait(r, "mismatched transfer");
  const char *msg = weft_request_error(r);
  char a[96], b[96];
  snprintf(a, sizeof a, "rank 0 sends %zu %s elements", n0, weft_dtype_name(t0));
  snprintf(b, sizeof b, "rank 1 expects %zu %s elements", n1, weft_dtype_name(t1));
  if (st != WEFT_ERR_MISMATCH) mp_fail("status %s, want MISMATCH (%s)", weft_status_string(st), msg);
  else if (!mp_contains(msg, a) || !mp_contains(msg, b)) mp_fail("message \"%s\" lacks \"%s\" or \"%s\"", msg, a, b);
  weft_request_free(r);
  /* the world is healthy: the same key again, matching */
  int32_t v = mp_rank == 0 ? 42 : 0;
  weft_tensor ok = tens(WEFT_DTYPE_INT32, s, 1, &v);
  if (mp_rank == 0) isend(mp_group, &ok, 1, key, &r, "send");
  else irecv(mp_group, &ok, 0, key, &r, "recv");
  if (mp_wait_ok(r, "transfer after a mismatch") && v != 42) mp_fail("received %d after the mismatch", (int)v);
  weft_request_free(r);
  mp_case_end();
}
