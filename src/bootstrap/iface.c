/* iface.c - looks up an interface's IPv4 address with getifaddrs(3). */
#include "bootstrap/iface.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "util/err.h"

weft_status wf_iface_ipv4(const char *name, char *out, size_t outlen) {
  if (!name || !*name || strlen(name) >= IF_NAMESIZE)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "network interface name '%s' is empty or longer than %d characters",
                  name ? name : "", IF_NAMESIZE - 1);
  if (outlen < INET_ADDRSTRLEN)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_iface_ipv4: output buffer of %zu bytes is too small", outlen);
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0)
    return wf_err(WEFT_ERR_SYSTEM, "cannot list the network interfaces (getifaddrs): %s", strerror(errno));
  char have[256] = "";
  size_t hlen = 0;
  int found = 0, exists = 0;
  for (struct ifaddrs *a = all; a; a = a->ifa_next) {
    int v4 = a->ifa_addr && a->ifa_addr->sa_family == AF_INET;
    if (!strcmp(a->ifa_name, name)) {
      exists = 1;
      if (v4) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)a->ifa_addr)->sin_addr, out, (socklen_t)outlen);
        found = 1;
        break;
      }
    } else if (v4 && hlen < sizeof have - 1) {
      int n = snprintf(have + hlen, sizeof have - hlen, "%s%s", hlen ? ", " : "", a->ifa_name);
      if (n > 0) hlen += (size_t)n;
      if (hlen >= sizeof have) hlen = sizeof have - 1;
    }
  }
  freeifaddrs(all);
  if (found) return WEFT_OK;
  return wf_err(WEFT_ERR_INVALID_ARGUMENT, "network interface '%s' %s (interfaces with an IPv4 address: %s)", name,
                exists ? "has no IPv4 address" : "does not exist", hlen ? have : "none");
}
