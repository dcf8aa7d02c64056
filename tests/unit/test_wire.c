/* test_wire.c - the wire format (src/wire): round trips of every message,
 * byte layouts pinned against hand-built frames, encoder argument checks,
 * and hostile input made from the round trips' payloads: every truncation,
 * trailing bytes and seeded random mutations. Frame headers and bad field
 * values: test_wire_fields.c. Exits non-zero on the first failed check. */
#include "test_wire_common.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull; /* fixed seed: reproducible */
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static void fill_str(char *dst, size_t len, char base) {
  for (size_t i = 0; i < len; i++) dst[i] = (char)(base + (char)(i % 26));
  dst[len] = '\0';
}

/* Reads a little-endian value straight from bytes (independent of the codec). */
static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Checks the single frame in b (of the expected type and src) and returns a
 * pointer to its payload. */
static const uint8_t *frame_payload(const wf_buf *b, size_t off, uint8_t type, uint32_t src, size_t *plen) {
  CHECK(!b->oom && b->len >= off + WF_FRAME_HDR_SIZE, "buffer too short (%zu)", b->len);
  const uint8_t *h = b->data + off;
  CHECK(memcmp(h, "WEFT", 4) == 0, "magic bytes %02x%02x%02x%02x", h[0], h[1], h[2], h[3]);
  CHECK(h[4] == 1 && h[5] == type, "version %u type %u (want 1, %u)", h[4], h[5], type);
  CHECK(le(h + 6, 2) == 0 && le(h + 8, 4) == src && le(h + 12, 4) == 0, "flags/src/reserved wrong");
  wf_frame_hdr fh;
  weft_status st = wf_frame_hdr_decode(h, MAX_CTRL, MAX_DATA, &fh, g_err, sizeof g_err);
  CHECK(st == WEFT_OK, "own header rejected: %s", g_err);
  CHECK(fh.type == type && fh.src == src && fh.flags == 0, "decoded header fields");
  CHECK(fh.length == le(h + 16, 8) && off + WF_FRAME_HDR_SIZE + fh.length <= b->len, "length %" PRIu64,
        fh.length);
  *plen = (size_t)fh.length;
  return h + WF_FRAME_HDR_SIZE;
}

/* ------------------------------------------------------------------ sample messages */
typedef struct sample {
  uint8_t type;
  uint8_t *p;
  size_t n;
} sample;
static sample g_samples[32];
static int g_nsamples;

static void keep_sample(uint8_t type, const uint8_t *p, size_t n) {
  CHECK(g_nsamples < 32, "too many samples");
  sample *s = &g_samples[g_nsamples++];
  s->type = type;
  s->p = malloc(n ? n : 1);
  CHECK(s->p != NULL, "malloc");
  memcpy(s->p, p, n);
  s->n = n;
}

/* ------------------------------------------------------------------ round trips */
static void test_hello(void) {
  wf_hello_msg m;
  memset(&m, 0, sizeof m);
  m.rank = 65534;
  m.size = 65535;
  m.pid = 4000000000u;
  fill_str(m.host, WF_HOST_MAX, 'a');
  strcpy(m.boot_id, "3f2b9c1e-8d7a-4b6c-9e5f-0a1b2c3d4e5f");
  strcpy(m.listen_addr, "192.168.100.200:65535");
  for (int i = 0; i < WF_SETTINGS_DIGEST; i++) m.settings_digest[i] = (uint8_t)(0xa0 + i);
  fill_str(m.settings, WF_SETTINGS_TEXT_MAX, 'S');
  m.incarnation = 0x8877665544332211ull;
  m.device_kinds = WF_DEVICE_KINDS_MASK;
  wf_buf b = {0};
  CHECK(wf_encode_hello(&b, 7, &m) == WEFT_OK, "encode hello");
  size_t n;
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_HELLO, 7, &n);
  CHECK(n == 12 + 2 + 255 + 2 + 36 + 2 + 21 + 32 + 2 + WF_SETTINGS_TEXT_MAX + 8 + 4, "HELLO payload %zu bytes", n);
  wf_hello_msg d;
  CHECK(wf_decode_hello(p, n, &d, g_err, sizeof g_err) == WEFT_OK, "decode hello: %s", g_err);
  CHECK(d.rank == m.rank && d.size == m.size && d.pid == m.pid && d.incarnation == m.incarnation,
        "hello ints %u %u %u %llx", d.rank, d.size, d.pid, (unsigned long long)d.incarnation);
  CHECK(!strcmp(d.host, m.host) && !strcmp(d.boot_id, m.boot_id) && !strcmp(d.listen_addr, m.listen_addr),
        "hello strings");
  CHECK(!memcmp(d.settings_digest, m.settings_digest, WF_SETTINGS_DIGEST) && !strcmp(d.settings, m.settings),
        "hello settings");
  CHECK(d.device_kinds == WF_DEVICE_KINDS_MASK, "hello device kinds 0x%x", d.device_kinds);
  keep_sample(WF_MSG_HELLO, p, n);
  wf_buf_free(&b);

  /* pinned layout: a small HELLO built by hand */
  memset(&m, 0, sizeof m);
  m.rank = 1;
  m.size = 2;
  m.pid = 0x01020304;
  strcpy(m.host, "h");
  strcpy(m.listen_addr, "a:1");
  m.settings_digest[0] = 0xee;
  m.settings_digest[31] = 0x11;
  strcpy(m.settings, "X=1\n");
  m.incarnation = 0x0807060504030201ull;
  m.device_kinds = 1u << WEFT_DEVICE_KIND_SIM;
  CHECK(wf_encode_hello(&b, 1, &m) == WEFT_OK, "encode small hello");
  static const uint8_t want[] = {'W', 'E', 'F', 'T', 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 72, 0, 0, 0, 0, 0, 0, 0,
                                 1, 0, 0, 0, 2, 0, 0, 0, 4, 3, 2, 1, 1, 0, 'h', 0, 0, 3, 0, 'a', ':', '1',
                                 0xee, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, 4, 0, 'X', '=', '1', '\n',
                                 1, 2, 3, 4, 5, 6, 7, 8, 4, 0, 0, 0};
  CHECK(b.len == sizeof want && memcmp(b.data, want, sizeof want) == 0, "small HELLO bytes differ (len %zu)", b.len);
  CHECK(wf_decode_hello(b.data + 24, b.len - 24, &d, g_err, sizeof g_err) == WEFT_OK && d.boot_id[0] == 0,
        "empty boot_id: %s", g_err);
  keep_sample(WF_MSG_HELLO, b.data + 24, b.len - 24);
  wf_buf_free(&b);

  /* encoder argument checks leave the buffer as it was */
  wf_hello_msg bad = m;
  bad.size = 0;
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "size 0 accepted");
  CHECK(strstr(weft_last_error(), "size"), "message names size: %s", weft_last_error());
  bad = m;
  bad.rank = 2;
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT, "rank == size accepted");
  bad = m;
  bad.host[0] = 0;
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT, "empty host accepted");
  bad = m;
  memset(bad.listen_addr, 'x', sizeof bad.listen_addr);
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT, "unterminated listen_addr accepted");
  CHECK(strstr(weft_last_error(), "listen_addr"), "message names listen_addr: %s", weft_last_error());
  bad = m;
  memset(bad.boot_id, 'x', sizeof bad.boot_id);
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "unterminated boot_id accepted");
  bad = m;
  memset(bad.settings, 'x', sizeof bad.settings);
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "unterminated settings accepted");
  CHECK(strstr(weft_last_error(), "settings"), "message names settings: %s", weft_last_error());
  bad = m;
  bad.device_kinds = 1u << 5;
  CHECK(wf_encode_hello(&b, 0, &bad) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "device kind bit 5 accepted");
  CHECK(strstr(weft_last_error(), "device_kinds"), "message names device_kinds: %s", weft_last_error());
  /* the decoder refuses what the encoder refuses: bit 5 patched into a good frame */
  CHECK(wf_encode_hello(&b, 1, &m) == WEFT_OK, "encode small hello again");
  b.data[b.len - 4] |= 1u << 5;
  CHECK(wf_decode_hello(b.data + 24, b.len - 24, &d, g_err, sizeof g_err) == WEFT_ERR_PROTOCOL &&
            strstr(g_err, "device_kinds"),
        "decoded device kind bit 5: %s", g_err);
  wf_buf_free(&b);
}

static void test_peers(void) {
  enum { N = 6 };
  wf_peer_info peers[N];
  memset(peers, 0, sizeof peers);
  for (int i = 0; i < N; i++) {
    fill_str(peers[i].host, i == 0 ? WF_HOST_MAX : (size_t)(1 + i), (char)('a' + i));
    snprintf(peers[i].listen_addr, sizeof peers[i].listen_addr, "10.0.%d.%d:%d", i, i * 7, 40000 + i);
    peers[i].pid = 1000u + (uint32_t)i * 77u;
    peers[i].local_rank = i % 3;
    peers[i].local_size = 3;
    peers[i].cross_rank = i / 3;
    peers[i].cross_size = 2;
    peers[i].incarnation = 0x1000000000000001ull * (uint64_t)(i + 1);
    peers[i].device_kinds = (uint32_t)i & WF_DEVICE_KINDS_MASK;
  }
  wf_peers_msg m = {N, peers};
  wf_buf b = {0};
  CHECK(wf_encode_peers(&b, 0, &m) == WEFT_OK, "encode peers: %s", weft_last_error());
  size_t n;
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_PEERS, 0, &n);
  wf_peers_msg d;
  CHECK(wf_decode_peers(p, n, &d, g_err, sizeof g_err) == WEFT_OK, "decode peers: %s", g_err);
  CHECK(d.size == N && d.peers, "peers size %u", d.size);
  for (int i = 0; i < N; i++) {
    const wf_peer_info *a = &peers[i], *c = &d.peers[i];
    CHECK(!strcmp(a->host, c->host) && !strcmp(a->listen_addr, c->listen_addr) && a->pid == c->pid &&
              a->local_rank == c->local_rank && a->local_size == c->local_size && a->cross_rank == c->cross_rank &&
              a->cross_size == c->cross_size && a->incarnation == c->incarnation && a->device_kinds == c->device_kinds,
          "peer %d differs", i);
  }
  wf_peers_msg_free(&d);
  CHECK(d.peers == NULL && d.size == 0, "free zeroes");
  keep_sample(WF_MSG_PEERS, p, n);
  wf_buf_free(&b);

  wf_peers_msg one = {1, peers + 1};
  peers[1].local_rank = peers[1].cross_rank = 0;
  peers[1].local_size = peers[1].cross_size = 1;
  CHECK(wf_encode_peers(&b, 0, &one) == WEFT_OK, "encode 1 peer");
  p = frame_payload(&b, 0, WF_MSG_PEERS, 0, &n);
  keep_sample(WF_MSG_PEERS, p, n);
  wf_buf_free(&b);

  wf_peers_msg empty = {0, peers};
  CHECK(wf_encode_peers(&b, 0, &empty) == WEFT_ERR_INVALID_ARGUMENT, "size 0 accepted");
  peers[2].local_rank = 3; /* == local_size */
  CHECK(wf_encode_peers(&b, 0, &m) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "local_rank 3 of 3 accepted");
  CHECK(strstr(weft_last_error(), "PEERS[2].local_rank"), "message: %s", weft_last_error());
  peers[2].local_rank = 2;
  peers[3].device_kinds = 1u; /* bit 0: AUTO, never a kind a rank has */
  CHECK(wf_encode_peers(&b, 0, &m) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "device kind bit 0 accepted");
  CHECK(strstr(weft_last_error(), "PEERS[3].device_kinds"), "message: %s", weft_last_error());
  wf_buf_free(&b);
}

static int64_t g_splits[4] = {0, 5, 1LL << 40, 3};

static void make_requests(wf_request_msg r[3]) {
  memset(r, 0, 3 * sizeof *r);
  r[0].group_id = 0xdeadbeef;
  r[0].coll = WF_COLL_ALLREDUCE;
  r[0].dtype = WEFT_DTYPE_BOOL;
  r[0].reduce_op = WEFT_OP_PRODUCT;
  r[0].ndim = WEFT_MAX_DIMS;
  r[0].root = -1;
  r[0].device = 3;
  r[0].priority = -100;
  r[0].unit = WF_UNIT_MAX;
  r[0].prescale = 0.1;
  r[0].postscale = -INFINITY;
  for (int d = 0; d < WEFT_MAX_DIMS; d++) r[0].shape[d] = d == 5 ? INT64_MAX : d * 1000003LL;
  fill_str(r[0].name, WF_NAME_MAX, 'A');
  r[1].coll = WF_COLL_ALLTOALL;
  r[1].dtype = WEFT_DTYPE_FLOAT16;
  r[1].ndim = 2;
  r[1].root = -1;
  r[1].device = WEFT_DEVICE_CPU;
  r[1].prescale = r[1].postscale = 1.0;
  r[1].shape[0] = 9;
  r[1].shape[1] = 4;
  r[1].nsplits = 4;
  r[1].splits = g_splits;
  strcpy(r[1].name, "grads/layer.1/weight");
  r[2].coll = WF_COLL_BROADCAST;
  r[2].root = 65535;
  r[2].device = WEFT_DEVICE_CPU;
  r[2].prescale = NAN;
  strcpy(r[2].name, "b");
}

static int same_f64(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_requests(void) {
  wf_request_msg r[3];
  make_requests(r);
  wf_buf b = {0};
  CHECK(wf_encode_requests(&b, 2, r, 3) == WEFT_OK, "encode requests: %s", weft_last_error());
  CHECK(wf_encode_requests(&b, 2, NULL, 0) == WEFT_OK, "encode empty requests");
  size_t n, n0;
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_REQUESTS, 2, &n);
  const uint8_t *p0 = frame_payload(&b, WF_FRAME_HDR_SIZE + n, WF_MSG_REQUESTS, 2, &n0);
  CHECK(n0 == 4 && le(p0, 4) == 0 && b.len == 2 * WF_FRAME_HDR_SIZE + n + 4, "empty REQUESTS frame");
  /* pinned layout of the first request's fixed part */
  CHECK(le(p, 4) == 3 && le(p + 4, 4) == 0xdeadbeef && p[8] == WF_COLL_ALLREDUCE && p[9] == WEFT_DTYPE_BOOL &&
            p[10] == WEFT_OP_PRODUCT && p[11] == 16 && le(p + 12, 4) == 0xffffffff && le(p + 16, 4) == 3 &&
            le(p + 20, 4) == (uint32_t)-100 && le(p + 24, 4) == WF_UNIT_MAX && le(p + 28, 8) == 0x3fb999999999999aull &&
            le(p + 36, 8) == 0xfff0000000000000ull && le(p + 44 + 5 * 8, 8) == (uint64_t)INT64_MAX,
        "REQUEST layout");
  CHECK(n == 4 + (40 + 16 * 8 + 4 + 2 + 255) + (40 + 2 * 8 + 4 + 4 * 8 + 2 + 20) + (40 + 4 + 2 + 1),
        "REQUESTS payload %zu bytes", n);
  wf_requests_msg d;
  CHECK(wf_decode_requests(p, n, &d, g_err, sizeof g_err) == WEFT_OK, "decode requests: %s", g_err);
  CHECK(d.count == 3, "count %u", d.count);
  for (int i = 0; i < 3; i++) {
    const wf_request_msg *a = &r[i], *c = &d.reqs[i];
    CHECK(a->group_id == c->group_id && a->coll == c->coll && a->dtype == c->dtype && a->reduce_op == c->reduce_op &&
              a->ndim == c->ndim && a->root == c->root && a->device == c->device && a->priority == c->priority &&
              a->unit == c->unit,
          "request %d scalars", i);
    CHECK(same_f64(a->prescale, c->prescale) && same_f64(a->postscale, c->postscale), "request %d scales", i);
    CHECK(memcmp(a->shape, c->shape, a->ndim * sizeof(int64_t)) == 0, "request %d shape", i);
    CHECK(a->nsplits == c->nsplits && (a->nsplits == 0 ? c->splits == NULL
                                                       : memcmp(a->splits, c->splits, a->nsplits * 8) == 0),
          "request %d splits", i);
    CHECK(!strcmp(a->name, c->name), "request %d name", i);
  }
  wf_requests_msg_free(&d);
  CHECK(wf_decode_requests(p0, n0, &d, g_err, sizeof g_err) == WEFT_OK && d.count == 0 && d.reqs == NULL,
        "decode empty requests: %s", g_err);
  keep_sample(WF_MSG_REQUESTS, p, n);
  keep_sample(WF_MSG_REQUESTS, p0, n0);
  wf_buf_free(&b);

  /* encoder argument checks: each names the field and leaves b untouched */
  wf_request_msg q;
  const char *fields[] = {"name", "name", "ndim", "dtype", "reduce_op", "coll", "nsplits", "nsplits",
                          "shape", "splits", "root", "device", "unit"};
  for (int k = 0; k < (int)(sizeof fields / sizeof *fields); k++) {
    make_requests(r);
    q = r[k % 2 == 0 ? 0 : 1];
    int64_t neg[4] = {1, 2, -1, 4};
    switch (k) {
      case 0: memset(q.name, 'n', sizeof q.name); break; /* 256 bytes, no NUL */
      case 1: q.name[0] = 0; break;
      case 2: q.ndim = WEFT_MAX_DIMS + 1; break;
      case 3: q.dtype = WEFT_DTYPE_COUNT_; break;
      case 4: q.reduce_op = WEFT_OP_COUNT_; break;
      case 5: q.coll = WF_COLL_COUNT_; break;
      case 6: q.nsplits = 1; q.splits = g_splits; break; /* allreduce with splits */
      case 7: q.nsplits = 0; break;                        /* alltoall without */
      case 8: q.shape[3] = -1; break;
      case 9: q.splits = neg; break;
      case 10: q.coll = WF_COLL_BROADCAST; q.root = -1; break;
      case 11: q.device = -2; break;
      case 12: q.unit = WF_UNIT_MAX + 1; break;
    }
    weft_status st = wf_encode_requests(&b, 0, &q, 1);
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "bad request %d accepted (%d)", k, (int)st);
    CHECK(strstr(weft_last_error(), fields[k]), "case %d: message should name %s: %s", k, fields[k],
          weft_last_error());
  }
  wf_buf_free(&b);
}

static void test_responses(void) {
  static char longname[WF_NAME_MAX + 1], errtext[WF_ERRMSG_MAX + 1];
  fill_str(longname, WF_NAME_MAX, 'a');
  fill_str(errtext, WF_ERRMSG_MAX, 'E');
  char *names0[5] = {longname, "x", "fused/1", "fused/2", "fused/3"};
  char *names1[1] = {"gather"};
  char *names2[1] = {"a2a"};
  char *names3[2] = {"bad1", "bad2"};
  int64_t gsz[4] = {3, 0, 7, INT64_MAX};
  int64_t a2a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 0};
  wf_response_msg r[5];
  memset(r, 0, sizeof r);
  r[0] = (wf_response_msg){.seq = UINT64_MAX, .group_id = 1, .coll = WF_COLL_ALLREDUCE, .nnames = 5, .names = names0};
  r[1] = (wf_response_msg){.seq = 1, .coll = WF_COLL_ALLGATHER, .nnames = 1, .names = names1, .nsizes = 4,
                           .sizes = gsz};
  r[2] = (wf_response_msg){.seq = 2, .coll = WF_COLL_ALLTOALL, .nnames = 1, .names = names2, .nsizes = 9,
                           .sizes = a2a};
  r[3] = (wf_response_msg){.seq = 3, .type = WF_RESP_ERROR, .coll = WF_COLL_REDUCESCATTER,
                           .status = WEFT_ERR_MISMATCH, .nnames = 2, .names = names3, .error = errtext};
  r[4] = (wf_response_msg){.seq = 4, .type = WF_RESP_ERROR, .coll = WF_COLL_BARRIER, .status = -1, .nnames = 1,
                           .names = names1, .error = NULL}; /* NULL error goes out as "" */
  wf_buf b = {0};
  CHECK(wf_encode_responses(&b, 0, r, 5) == WEFT_OK, "encode responses: %s", weft_last_error());
  size_t n;
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_RESPONSES, 0, &n);
  CHECK(le(p, 4) == 5 && le(p + 4, 8) == UINT64_MAX && le(p + 12, 4) == 1 && p[16] == 0 && p[17] == 0 &&
            le(p + 18, 4) == 0 && le(p + 22, 4) == 5 && le(p + 26, 2) == 255,
        "RESPONSE layout");
  wf_responses_msg d;
  CHECK(wf_decode_responses(p, n, &d, g_err, sizeof g_err) == WEFT_OK, "decode responses: %s", g_err);
  CHECK(d.count == 5, "count %u", d.count);
  for (int i = 0; i < 5; i++) {
    const wf_response_msg *a = &r[i], *c = &d.resps[i];
    CHECK(a->seq == c->seq && a->group_id == c->group_id && a->type == c->type && a->coll == c->coll &&
              a->status == c->status && a->nnames == c->nnames && a->nsizes == c->nsizes,
          "response %d scalars", i);
    for (uint32_t k = 0; k < a->nnames; k++) CHECK(!strcmp(a->names[k], c->names[k]), "response %d name %u", i, k);
    CHECK(a->nsizes == 0 ? c->sizes == NULL : memcmp(a->sizes, c->sizes, a->nsizes * 8) == 0, "response %d sizes",
          i);
  }
  CHECK(d.resps[0].error == NULL && d.resps[1].error == NULL, "OK responses carry no error");
  CHECK(d.resps[3].error && !strcmp(d.resps[3].error, errtext), "error text");
  CHECK(d.resps[4].error && d.resps[4].error[0] == 0, "NULL error decodes as \"\"");
  wf_responses_msg_free(&d);
  keep_sample(WF_MSG_RESPONSES, p, n);
  wf_buf_free(&b);

  CHECK(wf_encode_responses(&b, 0, NULL, 0) == WEFT_OK, "encode empty responses");
  p = frame_payload(&b, 0, WF_MSG_RESPONSES, 0, &n);
  CHECK(n == 4 && wf_decode_responses(p, n, &d, g_err, sizeof g_err) == WEFT_OK && d.count == 0 && !d.resps,
        "empty responses: %s", g_err);
  keep_sample(WF_MSG_RESPONSES, p, n);
  wf_buf_free(&b);

  /* encoder argument checks */
  const char *fields[] = {"status", "status", "type", "coll", "nsizes", "names", "names", "error", "sizes"};
  char *nullname[1] = {NULL};
  int64_t negs[1] = {-5};
  char toolong[WF_ERRMSG_MAX + 2];
  fill_str(toolong, WF_ERRMSG_MAX + 1, 'z');
  for (int k = 0; k < (int)(sizeof fields / sizeof *fields); k++) {
    wf_response_msg q = r[k % 2 ? 3 : 0];
    switch (k) {
      case 0: q.status = -3; break;  /* OK with a status */
      case 1: q.status = 0; break;   /* ERROR without one */
      case 2: q.type = 2; break;
      case 3: q.coll = 99; break;
      case 4: q.coll = WF_COLL_ALLTOALL; q.nsizes = 4 - 1; q.sizes = a2a; break;
      case 5: q.nnames = 0; break;
      case 6: q.names = nullname; q.nnames = 1; break;
      case 7: q.error = toolong; break;
      case 8: q.nsizes = 1; q.sizes = negs; break;
    }
    CHECK(wf_encode_responses(&b, 0, &q, 1) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0, "bad response %d accepted",
          k);
    CHECK(strstr(weft_last_error(), fields[k]), "case %d should name %s: %s", k, fields[k], weft_last_error());
  }
  /* an ERROR lists the group ranks it was decided without (a timeout, a
   * departure): any count, an alltoall's too (not a split matrix) */
  int64_t without[2] = {1, 3};
  wf_response_msg e = r[3];
  e.coll = WF_COLL_ALLTOALL;
  e.nnames = 1;
  e.nsizes = 2;
  e.sizes = without;
  CHECK(wf_encode_responses(&b, 0, &e, 1) == WEFT_OK, "ERROR alltoall listing 2 ranks: %s", weft_last_error());
  p = frame_payload(&b, 0, WF_MSG_RESPONSES, 0, &n);
  CHECK(wf_decode_responses(p, n, &d, g_err, sizeof g_err) == WEFT_OK && d.count == 1 && d.resps[0].nsizes == 2 &&
            d.resps[0].sizes[0] == 1 && d.resps[0].sizes[1] == 3,
        "ERROR alltoall listing 2 ranks does not round-trip: %s", g_err);
  wf_responses_msg_free(&d);
  wf_buf_free(&b);
  wf_response_msg q = r[0];
  q.error = "oops";
  CHECK(wf_encode_responses(&b, 0, &q, 1) == WEFT_ERR_INVALID_ARGUMENT, "OK response with error text accepted");
  wf_buf_free(&b);
}

static void test_abort_simple_data(void) {
  wf_buf b = {0};
  char reason[WF_ERRMSG_MAX + 1];
  size_t n;
  CHECK(wf_encode_abort(&b, 9, "rank 3: peer lost") == WEFT_OK, "encode abort");
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_ABORT, 9, &n);
  CHECK(n == 2 + 17 && le(p, 2) == 17, "ABORT layout");
  CHECK(wf_decode_abort(p, n, reason, sizeof reason, g_err, sizeof g_err) == WEFT_OK &&
            !strcmp(reason, "rank 3: peer lost"),
        "abort reason '%s'", reason);
  char small[6];
  CHECK(wf_decode_abort(p, n, small, sizeof small, g_err, sizeof g_err) == WEFT_OK && !strcmp(small, "rank "),
        "short reason buffer truncates: '%s'", small);
  keep_sample(WF_MSG_ABORT, p, n);
  wf_buf_free(&b);

  static char huge[WF_ERRMSG_MAX + 100];
  fill_str(huge, sizeof huge - 1, 'q');
  CHECK(wf_encode_abort(&b, 0, huge) == WEFT_OK, "encode long abort");
  p = frame_payload(&b, 0, WF_MSG_ABORT, 0, &n);
  CHECK(n == 2 + WF_ERRMSG_MAX, "long reason truncated to the max (%zu)", n);
  CHECK(wf_decode_abort(p, n, reason, sizeof reason, g_err, sizeof g_err) == WEFT_OK &&
            strlen(reason) == WF_ERRMSG_MAX && !strncmp(reason, huge, WF_ERRMSG_MAX),
        "long reason");
  wf_buf_free(&b);
  CHECK(wf_encode_abort(&b, 0, NULL) == WEFT_OK, "NULL reason");
  p = frame_payload(&b, 0, WF_MSG_ABORT, 0, &n);
  CHECK(n == 2 && wf_decode_abort(p, n, reason, sizeof reason, g_err, sizeof g_err) == WEFT_OK && !reason[0],
        "empty reason");
  keep_sample(WF_MSG_ABORT, p, n);
  wf_buf_free(&b);

  CHECK(wf_encode_simple(&b, 4, WF_MSG_HEARTBEAT) == WEFT_OK && wf_encode_simple(&b, 4, WF_MSG_BYE) == WEFT_OK,
        "simple");
  frame_payload(&b, 0, WF_MSG_HEARTBEAT, 4, &n);
  CHECK(n == 0, "heartbeat payload %zu", n);
  frame_payload(&b, WF_FRAME_HDR_SIZE, WF_MSG_BYE, 4, &n);
  CHECK(n == 0 && b.len == 2 * WF_FRAME_HDR_SIZE, "bye payload");
  CHECK(wf_encode_simple(&b, 4, WF_MSG_HELLO) == WEFT_ERR_INVALID_ARGUMENT && b.len == 48, "simple HELLO accepted");
  wf_buf_free(&b);

  uint8_t sh[WF_DATA_SUBHDR_SIZE];
  wf_data_hdr dh = {0x0102030405060708ull, 0xa0b0c0d0u}, dd;
  wf_data_hdr_encode(sh, &dh);
  static const uint8_t want[16] = {8, 7, 6, 5, 4, 3, 2, 1, 0xd0, 0xc0, 0xb0, 0xa0, 0, 0, 0, 0};
  CHECK(memcmp(sh, want, 16) == 0, "DATA sub-header bytes");
  CHECK(wf_data_hdr_decode(sh, &dd, g_err, sizeof g_err) == WEFT_OK && dd.seq == dh.seq && dd.index == dh.index,
        "data header round trip");
  sh[14] = 1;
  CHECK(wf_data_hdr_decode(sh, &dd, g_err, sizeof g_err) == WEFT_ERR_PROTOCOL && strstr(g_err, "reserved"),
        "DATA reserved accepted: %s", g_err);

  /* a buffer whose allocation failed before stays failed; nothing is appended */
  wf_buf dead = {0};
  dead.oom = 1;
  CHECK(wf_encode_abort(&dead, 0, "x") == WEFT_ERR_NO_MEMORY && dead.len == 0 && dead.data == NULL, "oom buffer");
  wf_buf_free(&dead);

  /* a tiny error buffer gets a truncated, terminated message */
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  uint8_t junk[3] = {1, 2, 3};
  CHECK(wf_decode_abort(junk, 3, reason, sizeof reason, tiny, sizeof tiny) == WEFT_ERR_PROTOCOL &&
            strlen(tiny) == sizeof tiny - 1 && !strncmp(tiny, "ABORT.r", 7),
        "tiny error buffer: '%.8s'", tiny);
  CHECK(wf_decode_abort(junk, 3, NULL, 0, NULL, 0) == WEFT_ERR_PROTOCOL, "NULL buffers");

  CHECK(!strcmp(wf_coll_name(WF_COLL_ALLREDUCE), "allreduce") && !strcmp(wf_coll_name(WF_COLL_BARRIER), "barrier") &&
            !strcmp(wf_coll_name(WF_COLL_REDUCESCATTER), "reducescatter") &&
            !strcmp(wf_coll_name((wf_coll)77), "unknown"),
        "coll names");
}

/* CACHED / RESEND: the response cache's compact references. */
static void test_cache_refs(void) {
  wf_cache_ref refs[3] = {{0, 0, 1}, {0xdeadbeef, WF_CACHE_MAX_IDS - 1, UINT64_MAX}, {7, 1023, 42}};
  wf_buf b = {0};
  CHECK(wf_encode_cache_refs(&b, 3, WF_MSG_CACHED, refs, 3) == WEFT_OK, "encode CACHED: %s", weft_last_error());
  CHECK(wf_encode_cache_refs(&b, 0, WF_MSG_RESEND, refs + 2, 1) == WEFT_OK, "encode RESEND: %s", weft_last_error());
  size_t n, n1;
  const uint8_t *p = frame_payload(&b, 0, WF_MSG_CACHED, 3, &n);
  const uint8_t *p1 = frame_payload(&b, WF_FRAME_HDR_SIZE + n, WF_MSG_RESEND, 0, &n1);
  /* pinned layout: u32 count, then {u32 group, u32 id, u64 epoch} */
  CHECK(n == 4 + 3 * 16 && n1 == 4 + 16, "CACHED %zu / RESEND %zu bytes", n, n1);
  CHECK(le(p, 4) == 3 && le(p + 4, 4) == 0 && le(p + 8, 4) == 0 && le(p + 12, 8) == 1 && le(p + 20, 4) == 0xdeadbeef &&
            le(p + 24, 4) == WF_CACHE_MAX_IDS - 1 && le(p + 28, 8) == UINT64_MAX && le(p1 + 4, 4) == 7 &&
            le(p1 + 8, 4) == 1023 && le(p1 + 12, 8) == 42,
        "CACHED layout");
  wf_cache_refs_msg d;
  CHECK(wf_decode_cache_refs(p, n, "CACHED", &d, g_err, sizeof g_err) == WEFT_OK && d.count == 3, "decode: %s", g_err);
  for (int i = 0; i < 3; i++)
    CHECK(d.refs[i].group_id == refs[i].group_id && d.refs[i].id == refs[i].id && d.refs[i].epoch == refs[i].epoch,
          "ref %d round trip", i);
  wf_cache_refs_msg_free(&d);
  CHECK(decode_any(WF_MSG_RESEND, p1, n1) == 2, "RESEND round trip: %s", g_err);
  keep_sample(WF_MSG_CACHED, p, n);
  keep_sample(WF_MSG_RESEND, p1, n1);
  wf_buf_free(&b);

  /* encoder checks: each names the field and leaves b untouched */
  wf_cache_ref bad[2] = {{0, WF_CACHE_MAX_IDS, 1}, {0, 0, 0}};
  const char *words[2] = {"id", "epoch"};
  for (int k = 0; k < 2; k++) {
    CHECK(wf_encode_cache_refs(&b, 0, WF_MSG_CACHED, &bad[k], 1) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0,
          "bad ref %d accepted", k);
    CHECK(strstr(weft_last_error(), words[k]), "case %d should name %s: %s", k, words[k], weft_last_error());
  }
  CHECK(wf_encode_cache_refs(&b, 0, WF_MSG_CACHED, refs, 0) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0,
        "empty CACHED accepted");
  CHECK(wf_encode_cache_refs(&b, 0, WF_MSG_CACHED, refs, 4097) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0,
        "4097 refs accepted");
  CHECK(wf_encode_cache_refs(&b, 0, WF_MSG_ABORT, refs, 1) == WEFT_ERR_INVALID_ARGUMENT && b.len == 0,
        "CACHED encoder with type ABORT accepted");
  wf_buf_free(&b);
}

/* ------------------------------------------------------------------ hostile payloads */
static void test_truncations(void) {
  for (int s = 0; s < g_nsamples; s++) {
    const sample *sm = &g_samples[s];
    CHECK(decode_any(sm->type, sm->p, sm->n) == 2, "sample %d (type %u) does not round trip: %s", s, sm->type, g_err);
    for (size_t k = 0; k < sm->n; k++) {
      uint8_t *cut = malloc(k ? k : 1); /* exact-size copy: ASan sees any over-read */
      CHECK(cut != NULL, "malloc");
      memcpy(cut, sm->p, k);
      g_err[0] = 0;
      CHECK(decode_any(sm->type, k ? cut : NULL, k) == 0, "sample %d truncated to %zu of %zu accepted", s, k, sm->n);
      CHECK(g_err[0] != 0, "sample %d truncated to %zu: no error message", s, k);
      free(cut);
    }
    uint8_t *longer = malloc(sm->n + 1);
    CHECK(longer != NULL, "malloc");
    memcpy(longer, sm->p, sm->n);
    longer[sm->n] = 0;
    CHECK(decode_any(sm->type, longer, sm->n + 1) == 0 && strstr(g_err, "trailing"),
          "sample %d with a trailing byte accepted: %s", s, g_err);
    free(longer);
  }
}

static void test_mutations(void) {
  int decoded = 0, rejected = 0;
  for (int s = 0; s < g_nsamples; s++) {
    const sample *sm = &g_samples[s];
    for (int it = 0; it < 1500; it++) {
      size_t n = sm->n;
      if (rnd() % 8 == 0) n = (size_t)(rnd() % (sm->n + 8)); /* sometimes shorter or longer */
      uint8_t *m = malloc(n ? n : 1);
      CHECK(m != NULL, "malloc");
      for (size_t i = 0; i < n; i++) m[i] = i < sm->n ? sm->p[i] : (uint8_t)rnd();
      int nmut = 1 + (int)(rnd() % 4);
      for (int k = 0; k < nmut && n; k++) {
        size_t at = (size_t)(rnd() % n);
        switch (rnd() % 4) {
          case 0: m[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
          case 1: m[at] = (uint8_t)rnd(); break;
          case 2: m[at] = 0; break;
          default: m[at] = 0xff; break;
        }
      }
      int r = decode_any(sm->type, m, n);
      CHECK(r != 1, "sample %d mutation %d decoded but re-encodes differently", s, it);
      if (r == 2) decoded++;
      else rejected++;
      free(m);
    }
  }
  /* both outcomes must occur, or the mutations test nothing */
  CHECK(decoded > 100 && rejected > 100, "mutations: %d decoded, %d rejected", decoded, rejected);
  printf("mutations: %d decoded and re-encoded identically, %d rejected\n", decoded, rejected);
}

int main(void) {
  test_hello();
  test_peers();
  test_requests();
  test_responses();
  test_abort_simple_data();
  test_cache_refs();
  test_truncations();
  test_mutations();
  for (int s = 0; s < g_nsamples; s++) free(g_samples[s].p);
  printf("test_wire: all checks passed (%d sample payloads)\n", g_nsamples);
  return 0;
}
