/* test_wire_fields.c - the wire format (src/wire) against hand-built
 * input: frame headers (magic, version, type, reserved bits, lengths over
 * the limits) and payloads with oversized counts, bad enum values, bad
 * strings and lengths, each rejected with a message naming the field.
 * Round trips, truncations and mutations: test_wire.c. Exits non-zero on
 * the first failed check. */
#include "test_wire_common.h"


/* ------------------------------------------------------------------ headers */
static weft_status hdr(uint32_t magic, uint8_t ver, uint8_t type, uint32_t reserved, uint64_t len, uint64_t max_ctrl,
                       uint64_t max_data, wf_frame_hdr *h) {
  uint8_t b[WF_FRAME_HDR_SIZE];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(magic >> (8 * i));
  b[4] = ver;
  b[5] = type;
  b[6] = 0x34; /* flags pass through */
  b[7] = 0x12;
  for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(77 >> (8 * i));
  for (int i = 0; i < 4; i++) b[12 + i] = (uint8_t)(reserved >> (8 * i));
  for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)(len >> (8 * i));
  memset(h, 0xee, sizeof *h);
  g_err[0] = 0;
  return wf_frame_hdr_decode(b, max_ctrl, max_data, h, g_err, sizeof g_err);
}

static void expect_bad_hdr(weft_status st, const wf_frame_hdr *h, const char *word, const char *what) {
  CHECK(st == WEFT_ERR_PROTOCOL, "%s accepted", what);
  CHECK(strstr(g_err, word), "%s: message '%s' lacks '%s'", what, g_err, word);
  CHECK(all_zero(h, sizeof *h), "%s: header not zeroed", what);
}

static void test_headers(void) {
  wf_frame_hdr h;
  const uint32_t M = WF_WIRE_MAGIC;
  CHECK(hdr(M, 1, WF_MSG_REQUESTS, 0, 1000, 1000, 10, &h) == WEFT_OK, "good header: %s", g_err);
  CHECK(h.type == WF_MSG_REQUESTS && h.flags == 0x1234 && h.src == 77 && h.length == 1000, "header fields");
  CHECK(hdr(M, 1, WF_MSG_DATA, 0, 1u << 20, 100, 1u << 20, &h) == WEFT_OK && h.length == 1u << 20, "DATA at cap");
  CHECK(hdr(M, 1, WF_MSG_HEARTBEAT, 0, 0, 100, 100, &h) == WEFT_OK, "heartbeat");
  CHECK(hdr(M, 1, WF_MSG_HELLO, 0, 3709, 4000, 100, &h) == WEFT_OK, "largest HELLO");
  expect_bad_hdr(hdr(M, 1, WF_MSG_HELLO, 0, 3710, 4000, 100, &h), &h, "HELLO", "HELLO over its largest size");
  expect_bad_hdr(hdr(M, 1, WF_MSG_HELLO, 0, 65, 4000, 100, &h), &h, "HELLO", "HELLO under its smallest size");
  expect_bad_hdr(hdr(0x54464558, 1, 1, 0, 30, 1000, 1000, &h), &h, "magic", "bad magic");
  expect_bad_hdr(hdr(M, 2, 1, 0, 30, 1000, 1000, &h), &h, "version", "version 2");
  expect_bad_hdr(hdr(M, 0, 1, 0, 30, 1000, 1000, &h), &h, "version", "version 0");
  expect_bad_hdr(hdr(M, 1, 0, 0, 30, 1000, 1000, &h), &h, "type 0", "type 0");
  expect_bad_hdr(hdr(M, 1, 200, 0, 30, 1000, 1000, &h), &h, "type 200", "type 200");
  char first_unknown[32];
  snprintf(first_unknown, sizeof first_unknown, "type %d", WF_MSG_TYPE_MAX_);
  expect_bad_hdr(hdr(M, 1, WF_MSG_TYPE_MAX_, 0, 30, 1000, 1000, &h), &h, first_unknown, "the first unknown type");
  CHECK(hdr(M, 1, WF_MSG_CACHED, 0, 20, 1000, 1000, &h) == WEFT_OK && h.type == WF_MSG_CACHED, "CACHED header");
  CHECK(hdr(M, 1, WF_MSG_RESEND, 0, 20, 1000, 1000, &h) == WEFT_OK && h.type == WF_MSG_RESEND, "RESEND header");
  expect_bad_hdr(hdr(M, 1, WF_MSG_REQUESTS, 0, 1ull << 40, UINT64_MAX >> 30, 1000, &h), &h, "1099511627776",
                 "2^40 under a 2^34 cap");
  expect_bad_hdr(hdr(M, 1, WF_MSG_DATA, 0, 1ull << 40, 1ull << 50, 1u << 30, &h), &h, "DATA", "DATA 2^40");
  expect_bad_hdr(hdr(M, 1, WF_MSG_RESPONSES, 0, 1001, 1000, 1ull << 40, &h), &h, "exceeds", "ctrl over cap");
  expect_bad_hdr(hdr(M, 1, WF_MSG_DATA, 0, 101, 1000, 100, &h), &h, "exceeds", "DATA over cap");
  expect_bad_hdr(hdr(M, 1, WF_MSG_HELLO, 0, 3710, 1u << 20, 1000, &h), &h, "HELLO", "HELLO over its own cap");
  expect_bad_hdr(hdr(M, 1, WF_MSG_ABORT, 0, 2 + WF_ERRMSG_MAX + 1, 1u << 20, 0, &h), &h, "ABORT", "ABORT over cap");
  expect_bad_hdr(hdr(M, 1, WF_MSG_HEARTBEAT, 0, 1, 1000, 1000, &h), &h, "HEARTBEAT", "heartbeat with payload");
  expect_bad_hdr(hdr(M, 1, WF_MSG_BYE, 0, 8, 1000, 1000, &h), &h, "BYE", "bye with payload");
  const uint8_t need[] = {WF_MSG_HELLO, WF_MSG_PEERS, WF_MSG_REQUESTS, WF_MSG_RESPONSES, WF_MSG_DATA, WF_MSG_ABORT};
  for (size_t i = 0; i < sizeof need; i++)
    expect_bad_hdr(hdr(M, 1, need[i], 0, 0, 1000, 1000, &h), &h, "minimum", "empty payload");
  expect_bad_hdr(hdr(M, 1, WF_MSG_DATA, 0, 15, 1000, 1000, &h), &h, "minimum", "DATA without sub-header");
  expect_bad_hdr(hdr(M, 1, WF_MSG_REQUESTS, 1, 10, 1000, 1000, &h), &h, "reserved", "reserved 1");
  expect_bad_hdr(hdr(M, 1, WF_MSG_REQUESTS, 0x80000000u, 10, 1000, 1000, &h), &h, "reserved", "reserved 2^31");
  CHECK(hdr(0, 0, 0, 0, 0, 0, 0, &h) == WEFT_ERR_PROTOCOL, "all-zero header");
  uint8_t zeros[WF_FRAME_HDR_SIZE] = {0};
  CHECK(wf_frame_hdr_decode(zeros, 1, 1, &h, NULL, 0) == WEFT_ERR_PROTOCOL, "NULL err buffer");
}

/* ------------------------------------------------------------------ hostile payloads */
/* Builds a payload from a hex-ish list of little-endian fields. */
typedef struct pb {
  uint8_t d[512];
  size_t n;
} pb;
static void put(pb *b, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; i++) b->d[b->n++] = (uint8_t)(v >> (8 * i));
}
static void put_str(pb *b, const char *s, size_t len) {
  put(b, len, 2);
  memcpy(b->d + b->n, s, len);
  b->n += len;
}

static void expect_reject(uint8_t type, const pb *b, weft_status want, const char *w1, const char *w2,
                          const char *what) {
  g_err[0] = 0;
  uint8_t *copy = malloc(b->n ? b->n : 1);
  CHECK(copy != NULL, "malloc");
  memcpy(copy, b->d, b->n);
  weft_status st = WEFT_OK;
  switch (type) {
    case WF_MSG_HELLO: { wf_hello_msg m; st = wf_decode_hello(copy, b->n, &m, g_err, sizeof g_err); break; }
    case WF_MSG_PEERS: { wf_peers_msg m; st = wf_decode_peers(copy, b->n, &m, g_err, sizeof g_err); break; }
    case WF_MSG_REQUESTS: { wf_requests_msg m; st = wf_decode_requests(copy, b->n, &m, g_err, sizeof g_err); break; }
    case WF_MSG_RESPONSES: {
      wf_responses_msg m;
      st = wf_decode_responses(copy, b->n, &m, g_err, sizeof g_err);
      break;
    }
    case WF_MSG_ABORT: { char r[8]; st = wf_decode_abort(copy, b->n, r, sizeof r, g_err, sizeof g_err); break; }
    case WF_MSG_CACHED: {
      wf_cache_refs_msg m;
      st = wf_decode_cache_refs(copy, b->n, "CACHED", &m, g_err, sizeof g_err);
      break;
    }
  }
  free(copy);
  CHECK(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, g_err);
  CHECK(!w1 || strstr(g_err, w1), "%s: message '%s' lacks '%s'", what, g_err, w1);
  CHECK(!w2 || strstr(g_err, w2), "%s: message '%s' lacks '%s'", what, g_err, w2);
  CHECK(decode_any(type, b->d, b->n) == 0, "%s: decode_any accepted", what);
}

/* One request with ndim 1; fields patched by the caller through offsets
 * (the grouped op's size, unit, at bytes 24..27). */
static void request_payload(pb *b, uint8_t coll, uint8_t dtype, uint8_t op, uint8_t ndim, int64_t dim0,
                            uint32_t nsplits, const char *name, size_t namelen) {
  b->n = 0;
  put(b, 1, 4);
  put(b, 0, 4);
  put(b, coll, 1);
  put(b, dtype, 1);
  put(b, op, 1);
  put(b, ndim, 1);
  put(b, (uint32_t)-1, 4);
  put(b, (uint32_t)-1, 4);
  put(b, 0, 4);
  put(b, 0, 4);
  put(b, 0, 8);
  put(b, 0, 8);
  for (int d = 0; d < ndim && d < 17; d++) put(b, (uint64_t)dim0, 8);
  put(b, nsplits, 4);
  for (uint32_t s = 0; s < nsplits && s < 4; s++) put(b, 1, 8);
  put_str(b, name, namelen);
}

static void response_payload(pb *b, uint8_t type, uint8_t coll, int32_t status, uint32_t nnames, uint32_t nsizes,
                             int64_t size0, const char *error) {
  b->n = 0;
  put(b, 1, 4);
  put(b, 5, 8);
  put(b, 0, 4);
  put(b, type, 1);
  put(b, coll, 1);
  put(b, (uint32_t)status, 4);
  put(b, nnames, 4);
  for (uint32_t k = 0; k < nnames && k < 2; k++) put_str(b, "t", 1);
  put(b, nsizes, 4);
  for (uint32_t k = 0; k < nsizes && k < 4; k++) put(b, (uint64_t)size0, 8);
  put_str(b, error, strlen(error));
}

static void test_bad_fields(void) {
  pb b;
  const weft_status P = WEFT_ERR_PROTOCOL;
  /* the reference builders themselves produce valid payloads */
  request_payload(&b, WF_COLL_ALLREDUCE, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1, 8, 0, "t", 1);
  CHECK(decode_any(WF_MSG_REQUESTS, b.d, b.n) == 2, "reference request rejected: %s", g_err);
  response_payload(&b, WF_RESP_ERROR, WF_COLL_ALLGATHER, -7, 2, 4, 3, "why");
  CHECK(decode_any(WF_MSG_RESPONSES, b.d, b.n) == 2, "reference response rejected: %s", g_err);

  request_payload(&b, WF_COLL_ALLREDUCE, WEFT_DTYPE_COUNT_, 0, 1, 8, 0, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "REQUESTS[0].dtype", "11", "dtype 11");
  request_payload(&b, WF_COLL_ALLREDUCE, 0, WEFT_OP_COUNT_, 1, 8, 0, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "reduce_op", "5", "op 5");
  request_payload(&b, 200, 0, 0, 1, 8, 0, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "coll", "200", "coll 200");
  request_payload(&b, 0, 0, 0, 17, 8, 0, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "ndim", "17", "ndim 17");
  request_payload(&b, 0, 0, 0, 1, -8, 0, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "shape", "-8", "negative dim");
  request_payload(&b, 0, 0, 0, 1, 8, 0, "", 0);
  expect_reject(WF_MSG_REQUESTS, &b, P, "name", "0", "empty name");
  request_payload(&b, 0, 0, 0, 1, 8, 0, "a\0b", 3);
  expect_reject(WF_MSG_REQUESTS, &b, P, "name", "NUL", "NUL in name");
  static char n256[300];
  memset(n256, 'n', 256);
  request_payload(&b, 0, 0, 0, 1, 8, 0, n256, 256);
  expect_reject(WF_MSG_REQUESTS, &b, P, "name", "256", "256-byte name");
  request_payload(&b, WF_COLL_ALLTOALL, 0, 0, 1, 8, WF_MAX_RANKS + 1, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "nsplits", "65537", "nsplits over the max");
  request_payload(&b, WF_COLL_ALLTOALL, 0, 0, 1, 8, WF_MAX_RANKS, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "nsplits", "65536", "nsplits more than the bytes");
  request_payload(&b, WF_COLL_ALLREDUCE, 0, 0, 1, 8, 2, "t", 1);
  expect_reject(WF_MSG_REQUESTS, &b, P, "nsplits", "allreduce", "splits on an allreduce");
  request_payload(&b, WF_COLL_ALLREDUCE, 0, 0, 1, 8, 0, "t", 1);
  b.d[24] = 0x01, b.d[25] = 0x00, b.d[26] = 0x01, b.d[27] = 0x00; /* 65537 */
  expect_reject(WF_MSG_REQUESTS, &b, P, "unit", "65537", "a grouped op over the maximum");

  /* counts far beyond the bytes fail as PROTOCOL, i.e. before any allocation
   * (a 2^32-entry calloc would be NO_MEMORY or an ASan abort) */
  b.n = 0;
  put(&b, UINT32_MAX, 4);
  expect_reject(WF_MSG_REQUESTS, &b, P, "count", "4294967295", "REQUESTS count 2^32-1");
  expect_reject(WF_MSG_RESPONSES, &b, P, "count", "4294967295", "RESPONSES count 2^32-1");
  b.n = 0;
  put(&b, WF_MAX_RANKS, 4);
  put_str(&b, "h", 1);
  expect_reject(WF_MSG_PEERS, &b, P, "size", "65536", "PEERS size 65536 in 7 bytes");
  response_payload(&b, WF_RESP_OK, 0, 0, UINT32_MAX, 0, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "nnames", "4294967295", "nnames 2^32-1");
  response_payload(&b, WF_RESP_OK, WF_COLL_ALLGATHER, 0, 1, UINT32_MAX, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "nsizes", "4294967295", "nsizes 2^32-1");

  response_payload(&b, 2, 0, 0, 1, 0, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "RESPONSES[0].type", "2", "resp type 2");
  response_payload(&b, 0, WF_COLL_COUNT_, 0, 1, 0, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "coll", "8", "resp coll 8");
  response_payload(&b, WF_RESP_ERROR, 0, 0, 1, 0, 0, "x");
  expect_reject(WF_MSG_RESPONSES, &b, P, "status", "0", "ERROR with status 0");
  response_payload(&b, WF_RESP_ERROR, 0, 3, 1, 0, 0, "x");
  expect_reject(WF_MSG_RESPONSES, &b, P, "status", "3", "ERROR with status 3");
  response_payload(&b, WF_RESP_OK, 0, -1, 1, 0, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "status", "-1", "OK with status -1");
  response_payload(&b, WF_RESP_OK, 0, 0, 1, 0, 0, "x");
  expect_reject(WF_MSG_RESPONSES, &b, P, "error", "1", "OK with error text");
  response_payload(&b, WF_RESP_OK, 0, 0, 0, 0, 0, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "names", "0", "no names");
  response_payload(&b, WF_RESP_OK, WF_COLL_ALLTOALL, 0, 1, 3, 1, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "nsizes", "3", "alltoall nsizes 3 is not square");
  response_payload(&b, WF_RESP_OK, WF_COLL_ALLTOALL, 0, 1, 4, 1, "");
  CHECK(decode_any(WF_MSG_RESPONSES, b.d, b.n) == 2, "alltoall 2x2 rejected: %s", g_err);
  response_payload(&b, WF_RESP_OK, WF_COLL_ALLGATHER, 0, 1, 2, -1, "");
  expect_reject(WF_MSG_RESPONSES, &b, P, "sizes", "-1", "negative size");

  b.n = 0;
  put(&b, 3, 4);
  put(&b, 3, 4);
  put(&b, 1, 4);
  put_str(&b, "h", 1);
  put_str(&b, "", 0);
  put_str(&b, "a:1", 3);
  for (int i = 0; i < WF_SETTINGS_DIGEST; i++) put(&b, (uint64_t)i, 1);
  put_str(&b, "A=1\n", 4);
  put(&b, 7, 8); /* incarnation */
  put(&b, 1u << WEFT_DEVICE_KIND_SIM, 4);
  expect_reject(WF_MSG_HELLO, &b, P, "rank", "3", "HELLO rank == size");
  b.d[0] = 0;
  CHECK(decode_any(WF_MSG_HELLO, b.d, b.n) == 2, "fixed HELLO rejected: %s", g_err);
  b.d[4] = 0;
  expect_reject(WF_MSG_HELLO, &b, P, "size", "0", "HELLO size 0");
  b.d[4] = 1;
  b.d[14] = 0; /* host "h" -> "\0" */
  expect_reject(WF_MSG_HELLO, &b, P, "host", "NUL", "NUL in host");
  b.d[14] = 'h';
  b.d[b.n - 4] = 0x80; /* device kind bit 7 */
  expect_reject(WF_MSG_HELLO, &b, P, "device_kinds", "0x80", "HELLO device kind bit 7");

  b.n = 0;
  put(&b, 2, 4);
  for (int i = 0; i < 2; i++) {
    put_str(&b, "h", 1);
    put_str(&b, "a:1", 3);
    put(&b, 1, 4);
    put(&b, (uint64_t)i, 4);
    put(&b, 2, 4);
    put(&b, 0, 4);
    put(&b, i ? 3 : 1, 4); /* entry 1: cross_size 3 > size 2 */
    put(&b, 9, 8);         /* incarnation */
    put(&b, 0, 4);
  }
  expect_reject(WF_MSG_PEERS, &b, P, "PEERS[1].cross_size", "3", "cross_size over size");
  b.n = 0;
  put(&b, 0, 4);
  expect_reject(WF_MSG_PEERS, &b, P, "size", "0", "PEERS size 0");

  /* CACHED: counts capped before allocation, bad ids and epochs named */
  b.n = 0;
  put(&b, UINT32_MAX, 4);
  expect_reject(WF_MSG_CACHED, &b, P, "count", "4294967295", "CACHED count 2^32-1");
  b.n = 0;
  put(&b, 0, 4);
  expect_reject(WF_MSG_CACHED, &b, P, "count", "0", "CACHED count 0");
  b.n = 0;
  put(&b, 4096, 4);
  put(&b, 0, 8);
  expect_reject(WF_MSG_CACHED, &b, P, "count", "4096", "CACHED count beyond the bytes");
  b.n = 0;
  put(&b, 1, 4);
  put(&b, 0, 4);
  put(&b, WF_CACHE_MAX_IDS, 4);
  put(&b, 1, 8);
  expect_reject(WF_MSG_CACHED, &b, P, "CACHED[0].id", "65536", "CACHED id over the max");
  b.n = 0;
  put(&b, 1, 4);
  put(&b, 0, 4);
  put(&b, 5, 4);
  put(&b, 0, 8);
  expect_reject(WF_MSG_CACHED, &b, P, "epoch", "0", "CACHED epoch 0");

  b.n = 0;
  put_str(&b, "ab\0", 3);
  expect_reject(WF_MSG_ABORT, &b, P, "reason", "NUL", "NUL in abort reason");
  b.n = 0;
  put(&b, WF_ERRMSG_MAX + 1, 2);
  expect_reject(WF_MSG_ABORT, &b, P, "reason", "4097", "reason over the max");
}

int main(void) {
  test_headers();
  test_bad_fields();
  printf("test_wire_fields: all checks passed\n");
  return 0;
}
