/* strmap.h - a small open hash map from NUL-terminated strings to pointers
 * (tensor tables, in-flight names). Keys are copied. Not thread-safe: the
 * owner serialises access. */
#ifndef WF_UTIL_STRMAP_H
#define WF_UTIL_STRMAP_H
#include <stddef.h>

typedef struct wf_strmap_entry {
  char *key;        /* NULL: empty slot */
  void *val;
  int tomb;         /* deleted (keeps probe chains intact) */
} wf_strmap_entry;

typedef struct wf_strmap {
  wf_strmap_entry *slots;
  size_t cap;       /* power of two or 0 */
  size_t len;       /* live entries */
  size_t used;      /* live + tombstones */
} wf_strmap;

void wf_strmap_init(wf_strmap *m);
void wf_strmap_free(wf_strmap *m);               /* frees keys, not values */
void *wf_strmap_get(const wf_strmap *m, const char *key);
/* Inserts or replaces. Returns 0, or -1 on allocation failure (map unchanged). */
int wf_strmap_put(wf_strmap *m, const char *key, void *val);
/* Removes; returns the old value or NULL. */
void *wf_strmap_del(wf_strmap *m, const char *key);
/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].key && !m->slots[i].tomb) ... */

#endif
