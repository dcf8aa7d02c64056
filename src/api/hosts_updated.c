/* hosts_updated.c - weft_elastic_hosts_updated: one question to the elastic
 * driver (weftrun) over its authenticated service (bootstrap/elastic.h,
 * CHECK/UPDATE): has the membership changed since this world's generation? */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/auth.h"
#include "bootstrap/elastic.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/params.h"

#define CHECK_SECONDS 10.0 /* the whole question */
#define HANDSHAKE_SECONDS 5.0

weft_status weft_elastic_hosts_updated(const weft_world *w, int *update) {
  if (!update) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_elastic_hosts_updated: update is NULL");
  *update = 0;
  if (!w || w->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "weft_elastic_hosts_updated: not a live world handle");
  const char *driver = wf_param_str("WEFT_ELASTIC_ADDR"), *idv = wf_param_str("WEFT_ELASTIC_ID");
  if (w->generation == 0 || !*driver) return WEFT_OK; /* not elastic: the world never changes */
  char *end;
  errno = 0;
  unsigned long id = strtoul(idv, &end, 10);
  if (!*idv || *end || errno || id >= WF_EL_DRIVER)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_elastic_hosts_updated: WEFT_ELASTIC_ID='%s' is not a worker id "
                  "(0..%u); it is set by weftrun in elastic mode", idv, WF_EL_DRIVER - 1);
  uint8_t secret[4096];
  size_t slen = 0;
  weft_status st = wf_auth_load_secret(secret, &slen);
  if (st != WEFT_OK) return st;
  wf_el_join_cfg jc = {.driver = driver,
                       .id = (uint32_t)id,
                       .secret = secret,
                       .secret_len = slen,
                       .job_id = wf_param_str("WEFT_JOB_ID"),
                       .timeout_seconds = CHECK_SECONDS,
                       .handshake_timeout = HANDSHAKE_SECONDS};
  uint32_t u = 0;
  st = wf_el_check(&jc, w->generation, &u);
  memset(secret, 0, sizeof secret);
  if (st == WEFT_OK) *update = (int)u;
  return st;
}
