"""Two network namespaces joined by a veth pair, with nftables loss rules: the helper that the
fault tier uses (tests/fault/netns.sh), for one bench run only."""

import os

from . import TOP
from .proc import MeasureError, on_cleanup, run

NETNS_SH = os.path.join(TOP, "tests", "fault", "netns.sh")


class Pair:
    """Namespaces <stem><pid>-a/-b; udz0 addresses <net>.1 (a) and <net>.2 (b). Deleted at exit
    and on SIGINT/SIGTERM; leftovers of killed runs are removed by create()."""

    def __init__(self, stem, net):
        self.stem, self.net = stem, net
        self.prefix = "%s%d" % (stem, os.getpid())
        self.a, self.b = self.prefix + "-a", self.prefix + "-b"
        self.addr_a = net + ".1"
        self.loss = None  # (pct, proto, unit) currently loaded
        self.up = False

    def _sh(self, *a, timeout=60):
        return run(["bash", NETNS_SH] + [str(x) for x in a], dict(os.environ), timeout)

    def create(self):
        self._sh("reap", self.stem)  # leftovers of killed runs (their pid is gone)
        rc, out, err = self._sh("up", self.prefix, self.net)
        if rc != 0:
            raise MeasureError("cannot create namespaces %s/%s: %s" % (self.a, self.b,
                                                                       (err or out)[-300:]))
        self.up = True
        on_cleanup(self.destroy)

    def set_loss(self, pct, proto="udp", unit=None):
        """unit: 'datagram' (GSO runs cut before the veth: the rule drops single datagrams)
        or 'run' (a GSO run crosses whole: the rule drops whole runs); default: 'run' without
        loss, 'datagram' with (tests/fault/netns.sh)."""
        if self.loss == (pct, proto, unit):
            return
        rc, out, err = self._sh("loss", self.prefix, pct, proto, *([unit] if unit else []))
        if rc != 0:
            raise MeasureError("cannot load nftables loss rules: %s" % (err or out)[-300:])
        self.loss = (pct, proto, unit)

    def counters(self):
        """(datagrams seen, dropped) summed over both namespaces since the rules were loaded."""
        rc, out, _ = self._sh("counters", self.prefix)
        seen = dropped = 0
        for l in out.splitlines():
            f = l.split()
            if len(f) == 5:
                seen += int(f[2])
                dropped += int(f[4])
        return seen, dropped

    def destroy(self):
        if self.up:
            self._sh("down", self.prefix)
            self.up = False
