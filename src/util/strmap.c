/* strmap.c - open-addressing (linear probing) string map with tombstones;
 * each entry stores its hash (probes skip strcmp on a mismatch, growing
 * reuses it). */
#include "util/strmap.h"

#include <stdlib.h>
#include <string.h>

static const char k_tomb_key[] = ""; /* a deleted slot's key: non-NULL, never compared */

/* Eight bytes at a time (names share long prefixes: "layer.12.weight"),
 * then a murmur3 finaliser so the low bits the table indexes by depend on
 * every byte. */
uint64_t wf_str_hash(const char *s) { return wf_str_hash_n(s, strlen(s)); }

uint64_t wf_str_hash_n(const char *s, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t t = 0; /* the last n < 8 bytes (a memcpy of n would be a call) */
  for (size_t i = 0; i < n; i++) t |= (uint64_t)(unsigned char)s[i] << (8 * i);
  h = (h ^ t) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

#define TAG(h) ((uint32_t)((h) >> 32))

void wf_strmap_init(wf_strmap *m) { memset(m, 0, sizeof *m); }

static void drop_key(wf_strmap_entry *e) {
  if (e->key && !e->tomb && !e->borrowed) free((char *)e->key);
}

void wf_strmap_free(wf_strmap *m) {
  for (size_t i = 0; i < m->cap; i++) drop_key(&m->slots[i]);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static wf_strmap_entry *find(const wf_strmap *m, const char *key, uint64_t h) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1;
  uint32_t tag = TAG(h);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    wf_strmap_entry *e = &m->slots[i];
    if (!e->key) return NULL;
    if (!e->tomb && e->hash == tag && (e->key == key || !strcmp(e->key, key))) return e;
  }
}

void *wf_strmap_get(const wf_strmap *m, const char *key) {
  wf_strmap_entry *e = find(m, key, wf_str_hash(key));
  return e ? e->val : NULL;
}

static int grow(wf_strmap *m) {
  /* tombstones count toward the load but not toward the size: a map with
   * steady adds and deletes rehashes in place instead of doubling forever */
  size_t ncap = m->cap ? m->cap : 16;
  while (m->len * 4 >= ncap) ncap *= 2;
  wf_strmap_entry *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -1;
  for (size_t i = 0; i < m->cap; i++) {
    wf_strmap_entry *e = &m->slots[i];
    if (!e->key || e->tomb) continue;
    /* only the high bits are kept: recompute the low ones (growth is rare) */
    size_t j = wf_str_hash(e->key) & (ncap - 1);
    while (ns[j].key) j = (j + 1) & (ncap - 1);
    ns[j] = *e;
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  m->used = m->len;
  return 0;
}

/* Stores key in a free slot of its probe sequence (the first tombstone on
 * the path, else the empty slot that ends it). The key is absent. */
static int store(wf_strmap *m, const char *key, uint64_t h, void *val, int borrow) {
  /* load (live + tombstones) at most 1/2: probe chains stay short */
  if ((m->used + 1) * 2 >= m->cap && grow(m)) return -1;
  const char *k = key;
  if (!borrow && !(k = strdup(key))) return -1;
  size_t mask = m->cap - 1;
  size_t i = h & mask;
  while (m->slots[i].key && !m->slots[i].tomb) i = (i + 1) & mask;
  if (!m->slots[i].key) m->used++; /* else: reuses a tombstone */
  m->slots[i].key = k;
  m->slots[i].val = val;
  m->slots[i].hash = TAG(h);
  m->slots[i].tomb = 0;
  m->slots[i].borrowed = (uint8_t)!!borrow;
  m->len++;
  return 0;
}

int wf_strmap_get_or_insert(wf_strmap *m, const char *key, void *val, int borrow, void **found) {
  /* grow first (as store would), so the slot found below stays valid */
  if ((m->used + 1) * 2 >= m->cap && grow(m)) return -1;
  uint64_t h = wf_str_hash(key);
  size_t mask = m->cap - 1, i = h & mask, slot = SIZE_MAX;
  uint32_t tag = TAG(h);
  for (;; i = (i + 1) & mask) {
    wf_strmap_entry *e = &m->slots[i];
    if (!e->key) break;
    if (e->tomb) {
      if (slot == SIZE_MAX) slot = i; /* the first tombstone on the path */
    } else if (e->hash == tag && (e->key == key || !strcmp(e->key, key))) {
      *found = e->val;
      return 1;
    }
  }
  const char *k = key;
  if (!borrow && !(k = strdup(key))) return -1;
  if (slot == SIZE_MAX) {
    slot = i;
    m->used++;
  }
  wf_strmap_entry *e = &m->slots[slot];
  e->key = k;
  e->val = val;
  e->hash = tag;
  e->tomb = 0;
  e->borrowed = (uint8_t)!!borrow;
  m->len++;
  return 0;
}

int wf_strmap_put(wf_strmap *m, const char *key, void *val) {
  uint64_t h = wf_str_hash(key);
  wf_strmap_entry *e = find(m, key, h);
  if (e) {
    e->val = val;
    return 0;
  }
  return store(m, key, h, val, 0);
}

int wf_strmap_insert(wf_strmap *m, const char *key, void *val, int borrow) {
  return wf_strmap_insert_h(m, key, wf_str_hash(key), val, borrow);
}

int wf_strmap_insert_h(wf_strmap *m, const char *key, uint64_t h, void *val, int borrow) {
  if (find(m, key, h)) return 1;
  return store(m, key, h, val, borrow);
}

static void *remove_entry(wf_strmap *m, wf_strmap_entry *e) {
  void *v = e->val;
  drop_key(e); /* the caller's key may be e->key itself: not read after this */
  e->key = k_tomb_key;
  e->tomb = 1;
  e->borrowed = 0;
  e->val = NULL;
  m->len--;
  return v;
}

void *wf_strmap_del(wf_strmap *m, const char *key) {
  wf_strmap_entry *e = find(m, key, wf_str_hash(key));
  return e ? remove_entry(m, e) : NULL;
}

int wf_strmap_del_val(wf_strmap *m, const char *key, const void *val) {
  return wf_strmap_del_val_h(m, key, wf_str_hash(key), val);
}

int wf_strmap_del_val_h(wf_strmap *m, const char *key, uint64_t h, const void *val) {
  wf_strmap_entry *e = find(m, key, h);
  if (!e || e->val != val) return 0;
  remove_entry(m, e);
  return 1;
}
