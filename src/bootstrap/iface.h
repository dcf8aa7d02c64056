/* iface.h - the IPv4 address of a network interface by name (WEFT_IFACE,
 * weftrun --network-interface): ranks bind and advertise that address. */
#ifndef WF_BOOTSTRAP_IFACE_H
#define WF_BOOTSTRAP_IFACE_H
#include <stddef.h>

#include "weft.h"

/* Writes the first IPv4 address of interface `name` ("eth0") as dotted
 * text into out (at least 16 bytes). Errors (no such interface, no IPv4
 * address, name too long) name the interface and the interfaces that do
 * have an IPv4 address, through util/err.h. */
weft_status wf_iface_ipv4(const char *name, char *out, size_t outlen);

#endif
