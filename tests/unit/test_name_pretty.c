/* test_name_pretty.c - wf_name_pretty (util/err.c): an instance's reserved
 * name ("\x01instance <key>") reads "instance <key>" in messages, quoted or
 * after "tensor ", one or several times; text without the mark is left
 * alone; wf_err applies it. */
#include <string.h>

#include "unit_check.h"
#include "util/err.h"

static void expect(const char *in, const char *want) {
  char buf[256];
  strcpy(buf, in);
  wf_name_pretty(buf);
  CHECK(!strcmp(buf, want), "\"%s\" became \"%s\", want \"%s\"", in + (in[0] == '\001'), buf, want);
}

int main(void) {
  expect("tensor '\001instance 42': mismatched dtypes", "instance 42: mismatched dtypes");
  expect("stalled: tensor '\001instance 7' (allreduce) waits", "stalled: instance 7 (allreduce) waits");
  expect("a '\001instance 1' and tensor '\001instance 2' end", "a instance 1 and instance 2 end");
  expect("weft_allreduce('\001instance 5'): bad", "weft_allreduce(instance 5): bad");
  expect("\001instance 9", "instance 9");
  expect("tensor 'x': mismatched dtypes", "tensor 'x': mismatched dtypes");
  expect("", "");
  wf_err(WEFT_ERR_MISMATCH, "tensor '%s': no", "\001instance 3");
  CHECK(!strcmp(wf_err_msg(), "instance 3: no"), "wf_err gave \"%s\"", wf_err_msg());
  return unit_result("test_name_pretty");
}
