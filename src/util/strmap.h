/* strmap.h - a small open hash map from NUL-terminated strings to pointers
 * (tensor tables, in-flight names). Keys are copied, or borrowed (the
 * caller keeps a borrowed key alive and unchanged until its entry is
 * deleted or the map freed: a key stored in the object the map points to).
 * Each entry keeps its key's hash, so probes compare strings only on a hash
 * match and growing never rehashes a string. Not thread-safe: the owner
 * serialises access. */
#ifndef WF_UTIL_STRMAP_H
#define WF_UTIL_STRMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct wf_strmap_entry {
  const char *key;  /* NULL: empty slot; a deleted slot keeps a non-NULL placeholder */
  void *val;
  uint32_t hash;    /* high bits of the key's hash */
  uint8_t tomb;     /* deleted (keeps probe chains intact) */
  uint8_t borrowed; /* the key belongs to the caller */
} wf_strmap_entry;

typedef struct wf_strmap {
  wf_strmap_entry *slots;
  size_t cap;       /* power of two or 0 */
  size_t len;       /* live entries */
  size_t used;      /* live + tombstones */
} wf_strmap;

/* The maps' string hash: 64 bits, every byte mixed into the low ones (the
 * one-host board hashes names with it too). */
uint64_t wf_str_hash(const char *s);
uint64_t wf_str_hash_n(const char *s, size_t n); /* the same for s of n bytes (strlen(s)) */
void wf_strmap_init(wf_strmap *m);
void wf_strmap_free(wf_strmap *m);               /* frees copied keys, not values */
void *wf_strmap_get(const wf_strmap *m, const char *key);
/* Inserts (copying the key) or replaces. Returns 0, or -1 on allocation
 * failure (map unchanged). */
int wf_strmap_put(wf_strmap *m, const char *key, void *val);
/* Inserts key -> val only if key is absent: 0 inserted, 1 present (map
 * unchanged), -1 out of memory (map unchanged). borrow: store the caller's
 * pointer instead of a copy (see above). One probe sequence. */
int wf_strmap_insert(wf_strmap *m, const char *key, void *val, int borrow);
/* The same with h = wf_str_hash(key), computed once by the caller. */
int wf_strmap_insert_h(wf_strmap *m, const char *key, uint64_t h, void *val, int borrow);
/* The value under key if present (returns 1, *found set), else inserts
 * key -> val like wf_strmap_insert (returns 0; -1 out of memory). One
 * probe sequence. */
int wf_strmap_get_or_insert(wf_strmap *m, const char *key, void *val, int borrow, void **found);
/* Removes; returns the old value or NULL. */
void *wf_strmap_del(wf_strmap *m, const char *key);
/* Removes key only if it maps to val; returns 1 if it did. */
int wf_strmap_del_val(wf_strmap *m, const char *key, const void *val);
int wf_strmap_del_val_h(wf_strmap *m, const char *key, uint64_t h, const void *val); /* h = wf_str_hash(key) */
/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].key && !m->slots[i].tomb) ... */

#endif
