/*
 * Which peers ud_zcopy serves: reachability, and the peers on this host that it leaves to a
 * shared-memory transport (UCX_UD_ZCOPY_ON_HOST).
 *
 * Why the transport decides this itself: UCP 1.22 keeps a network transport off the lanes
 * between two processes of one host (UCT_IFACE_FLAG_INTER_NODE), but UCP 1.13 does not. Given
 * UCX_TLS=rdmach,ud_zcopy,self it fills UCX_MAX_RNDV_LANES=2 with rdmach and ud_zcopy for an
 * on-host peer (the bandwidth ratio that would drop ud_zcopy applies only at rendezvous time,
 * and the lane is wired up and its iface progressed before that): the peer is reachable, and
 * reachability is the only thing UCP 1.13 asks a transport about one peer. So ud_zcopy answers
 * "unreachable" for a peer that the shared-memory transports the user named will reach.
 *
 * A peer it serves on this host is reached through the kernel's loopback from every device's
 * iface (the route to an address of this host is lo, whatever device holds it), so the
 * ifaces of one worker are one path to it, not several. UCP cannot tell: it took lo and eth0
 * as two rails, split every rendezvous get between them (52% and 48% on 1.22), and counted
 * twice the bandwidth, which moved its rendezvous threshold down. Both halves crossed the same
 * loopback on the same two cores, and each paid a request and its completions: an MPICH
 * ping-pong of 256 KiB took 0.69-0.80x the time on one lane. So when both ends' workers have an
 * iface on a loopback device of the same wire (the device address says so for the peer), an
 * iface on any other device answers "unreachable" for a peer of this host: loopback is its
 * one lane. Where either end has no loopback iface (UCX_NET_DEVICES without lo), every device
 * serves it, as before; the rule is the same at both ends, so the two ends of a simultaneous
 * connect choose the same lanes.
 */
#include "udz_uct.h"

#include <ucs/sys/sys.h>
#include <string.h>
#include <stdlib.h>

/*
 * The namespaces every shared-memory transport of a host agrees on: rdmach and unimem ask for
 * the boot id and the PID namespace (uct/common/ucx_ext_sm.h), UCX's posix and sysv for the
 * system id and the IPC namespace. With the 64-bit host hash (system id and network
 * namespace) equal too, each of them reaches the peer.
 */
uint32_t uct_udz_shm_domain(void)
{
    uint64_t h = (uint64_t)ucs_sys_get_ns(UCS_SYS_NS_TYPE_PID) * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)ucs_sys_get_ns(UCS_SYS_NS_TYPE_IPC) * 0xc2b2ae3d27d4eb4full;

    return (uint32_t)(h ^ (h >> 32));
}

static int udz_tls_is(const char *tok, size_t len, const char *name)
{
    return (strlen(name) == len) && (memcmp(tok, name, len) == 0);
}

/*
 * ON_HOST=auto: whether the user's UCX_TLS (the environment's; a value set only in ucx.conf
 * is not seen) lists ud_zcopy as a main transport next to one that carries active messages
 * between the processes of a host: UCX's posix or sysv (by name or as sm, shm, mm), rdmach or
 * unimem. Anything else serves every peer:
 *  - UCX_TLS unset, "all" or a "^" list: which transports run is not known here, and serving
 *    an on-host peer costs a lane; leaving one that nothing else reaches would fail the job;
 *  - ud_zcopy:aux: UCP wants it for wireup (of rdmach's RC wire, on one host too);
 *  - UCX_SHM_DEVICES set to anything but "all": the shared-memory transports may have no
 *    device (an empty value gives them none; "none", which UCX warns is no device's name, too).
 */
static int udz_tls_yields_on_host(void)
{
    static const char *const shm_am[] = {"sm", "shm", "mm", "posix", "sysv", "rdmach",
                                         "unimem"};
    const char *tls  = getenv("UCX_TLS");
    const char *devs = getenv("UCX_SHM_DEVICES");
    int main_udz = 0, shm = 0;
    const char *tok, *end, *colon;
    size_t len, i;

    if ((tls == NULL) || (tls[0] == '\0') || (tls[0] == '^') ||
        ((devs != NULL) && strcmp(devs, "all"))) {
        return 0;
    }
    for (tok = tls; *tok != '\0'; tok = (*end == ',') ? end + 1 : end) {
        end   = tok + strcspn(tok, ",");
        colon = memchr(tok, ':', end - tok);
        len   = ((colon != NULL) ? colon : end) - tok;
        if (udz_tls_is(tok, len, "ud_zcopy")) {
            main_udz = (colon == NULL);     /* "ud_zcopy:aux": a wireup helper */
            if (!main_udz) {
                return 0;
            }
        }
        for (i = 0; i < ucs_static_array_size(shm_am); i++) {
            shm |= udz_tls_is(tok, len, shm_am[i]);
        }
    }
    return main_udz && shm;
}

int uct_udz_on_host_yields(int on_host)
{
    switch (on_host) {
    case UCS_YES:
        return 0;
    case UCS_NO:
        return 1;
    default:    /* auto (and try) */
        return udz_tls_yields_on_host();
    }
}

int uct_udz_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                               const uct_iface_addr_t *iface_addr)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    uct_udz_host_id_t remote;
    int same_host;

    memcpy(&remote, UCS_PTR_BYTE_OFFSET(dev_addr, iface->wops->dev_addr_len), sizeof(remote));
    same_host = (remote.hash == iface->host.hash);
    if (same_host && iface->yield_on_host && (remote.shm == iface->host.shm)) {
        return 0;   /* a shared-memory transport reaches it */
    }
    if (same_host && !iface->loopback && (remote.flags & UCT_UDZ_HOST_VIA_LOOPBACK) &&
        uct_udz_worker_loopback(iface)) {
        return 0;   /* both ends reach this host through their loopback iface */
    }
    return iface->wops->is_reachable(iface->wire, dev_addr, same_host);
}
