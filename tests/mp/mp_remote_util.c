/* mp_remote_util.c - what the remote-execution tests (mp_remote.c,
 * mp_remote_bulk.c) share: a call that must succeed, and new object ids.
 * Included after mp_harness.c. */

static void must(weft_status st, const char *what) {
  if (st != WEFT_OK) mp_fatal("%s: %s: %s", what, weft_status_string(st), weft_last_error());
}

static weft_remote_id new_id(void) {
  weft_remote_id id;
  must(weft_remote_id_new(mp_world, &id), "weft_remote_id_new");
  return id;
}
