/* strmap.c - open-addressing (linear probing) string map with tombstones. */
#include "util/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

void wf_strmap_init(wf_strmap *m) { memset(m, 0, sizeof *m); }

void wf_strmap_free(wf_strmap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static wf_strmap_entry *find(const wf_strmap *m, const char *key) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1;
  for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
    wf_strmap_entry *e = &m->slots[i];
    if (!e->key) return NULL;
    if (!e->tomb && !strcmp(e->key, key)) return e;
  }
}

void *wf_strmap_get(const wf_strmap *m, const char *key) {
  wf_strmap_entry *e = find(m, key);
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
    if (!e->key) continue;
    if (e->tomb) { free(e->key); continue; }
    size_t j = hash(e->key) & (ncap - 1);
    while (ns[j].key) j = (j + 1) & (ncap - 1);
    ns[j] = *e;
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  m->used = m->len;
  return 0;
}

int wf_strmap_put(wf_strmap *m, const char *key, void *val) {
  wf_strmap_entry *e = find(m, key);
  if (e) { e->val = val; return 0; }
  /* load (live + tombstones) at most 1/2: probe chains stay short */
  if ((m->used + 1) * 2 >= m->cap && grow(m)) return -1;
  char *k = strdup(key);
  if (!k) return -1;
  size_t mask = m->cap - 1;
  size_t i = hash(key) & mask;
  while (m->slots[i].key && !m->slots[i].tomb) i = (i + 1) & mask;
  if (m->slots[i].key) free(m->slots[i].key); /* reuse the first tombstone on the path */
  else m->used++;
  m->slots[i].key = k;
  m->slots[i].val = val;
  m->slots[i].tomb = 0;
  m->len++;
  return 0;
}

void *wf_strmap_del(wf_strmap *m, const char *key) {
  wf_strmap_entry *e = find(m, key);
  if (!e) return NULL;
  void *v = e->val;
  e->tomb = 1;
  e->val = NULL;
  m->len--;
  return v;
}
