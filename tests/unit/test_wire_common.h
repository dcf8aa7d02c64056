/* test_wire_common.h - what the wire format tests (test_wire.c: round
 * trips, truncations and mutations; test_wire_fields.c: frame headers and
 * bad field values) share: CHECK, which exits non-zero on the first failed
 * check, the decoders' error buffer, and decode_any, which decodes a payload
 * of any message type, re-encodes it and compares the bytes.
 *
 * Header-only because every tests/unit/test_*.c is built alone; functions
 * are static inline so a test that does not use one gets no warning. */
#ifndef WF_TESTS_UNIT_TEST_WIRE_COMMON_H
#define WF_TESTS_UNIT_TEST_WIRE_COMMON_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: FAILED: %s\n  ", __FILE__, __LINE__, #cond);     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define MAX_CTRL (64u << 20)
#define MAX_DATA (1u << 30)

static char g_err[512];

/* ------------------------------------------------------------------ helpers */
static inline int all_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* Decodes payload p[0..n) as message type t; on success re-encodes and
 * returns whether the bytes match (2 = decoded and consistent). Returns 0
 * when rejected, after checking the output was left zeroed. */
static inline int decode_any(uint8_t t, const uint8_t *p, size_t n) {
  wf_buf b = {0};
  weft_status st, est = WEFT_OK;
  switch (t) {
    case WF_MSG_HELLO: {
      wf_hello_msg m;
      memset(&m, 0xab, sizeof m);
      st = wf_decode_hello(p, n, &m, g_err, sizeof g_err);
      if (st != WEFT_OK) {
        CHECK(all_zero(&m, sizeof m), "HELLO not zeroed after error");
        return 0;
      }
      est = wf_encode_hello(&b, 1, &m);
      break;
    }
    case WF_MSG_PEERS: {
      wf_peers_msg m;
      memset(&m, 0xab, sizeof m);
      st = wf_decode_peers(p, n, &m, g_err, sizeof g_err);
      if (st != WEFT_OK) {
        CHECK(all_zero(&m, sizeof m), "PEERS not zeroed after error");
        return 0;
      }
      est = wf_encode_peers(&b, 1, &m);
      wf_peers_msg_free(&m);
      break;
    }
    case WF_MSG_REQUESTS: {
      wf_requests_msg m;
      memset(&m, 0xab, sizeof m);
      st = wf_decode_requests(p, n, &m, g_err, sizeof g_err);
      if (st != WEFT_OK) {
        CHECK(all_zero(&m, sizeof m), "REQUESTS not zeroed after error");
        return 0;
      }
      est = wf_encode_requests(&b, 1, m.reqs, m.count);
      wf_requests_msg_free(&m);
      break;
    }
    case WF_MSG_RESPONSES: {
      wf_responses_msg m;
      memset(&m, 0xab, sizeof m);
      st = wf_decode_responses(p, n, &m, g_err, sizeof g_err);
      if (st != WEFT_OK) {
        CHECK(all_zero(&m, sizeof m), "RESPONSES not zeroed after error");
        return 0;
      }
      est = wf_encode_responses(&b, 1, m.resps, m.count);
      wf_responses_msg_free(&m);
      break;
    }
    case WF_MSG_ABORT: {
      char reason[WF_ERRMSG_MAX + 1];
      st = wf_decode_abort(p, n, reason, sizeof reason, g_err, sizeof g_err);
      if (st != WEFT_OK) return 0;
      est = wf_encode_abort(&b, 1, reason);
      break;
    }
    case WF_MSG_CACHED:
    case WF_MSG_RESEND: {
      wf_cache_refs_msg m;
      memset(&m, 0xab, sizeof m);
      st = wf_decode_cache_refs(p, n, t == WF_MSG_CACHED ? "CACHED" : "RESEND", &m, g_err, sizeof g_err);
      if (st != WEFT_OK) {
        CHECK(all_zero(&m, sizeof m), "CACHED/RESEND not zeroed after error");
        return 0;
      }
      est = wf_encode_cache_refs(&b, 1, (wf_msg_type)t, m.refs, m.count);
      wf_cache_refs_msg_free(&m);
      break;
    }
    default: CHECK(0, "bad type %u", t);
  }
  CHECK(st == WEFT_OK && est == WEFT_OK, "re-encode of a decoded type %u failed: %d", t, (int)est);
  int same = b.len == WF_FRAME_HDR_SIZE + n && memcmp(b.data + WF_FRAME_HDR_SIZE, p, n) == 0;
  wf_buf_free(&b);
  return same ? 2 : 1;
}

#endif
