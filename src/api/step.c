/* step.c - weft_step_next, weft_step_retire, weft_step_refresh (weft.h):
 * the handle and argument checks; the sequences are engine/steps.c's. */
#include "engine/submit.h"
#include "util/err.h"

static weft_status check(const char *fn, weft_group *g) {
  wf_err_clear();
  if (!g || g->magic != WF_GROUP_MAGIC || !g->world || g->world->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "%s: not a live group handle", fn);
  if (g->rank < 0) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: this rank is not a member of group %u", fn, g->id);
  return WEFT_OK;
}

weft_status weft_step_next(weft_group *g, int64_t graph_key, int64_t *step_id) {
  WF_CHECK(check("weft_step_next", g));
  if (!step_id) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_step_next: step_id is NULL");
  *step_id = -1;
  return wf_step_get(g, graph_key, 0, step_id);
}

weft_status weft_step_retire(weft_group *g, int64_t graph_key, int64_t step_id) {
  WF_CHECK(check("weft_step_retire", g));
  return wf_step_retire(g, graph_key, step_id);
}

weft_status weft_step_refresh(weft_group *g, int64_t graph_key) {
  WF_CHECK(check("weft_step_refresh", g));
  int64_t id;
  return wf_step_get(g, graph_key, 1, &id);
}
