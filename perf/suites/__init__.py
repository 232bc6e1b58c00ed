"""One module per `perf/bench` suite. Each has NAME (the subcommand), HELP, add_arguments(p)
and run(args) -> exit status; CONTENTION = False leaves out --max-stall/--retry-contended and
TIMEOUT = (default, help) and REPS_HELP replace the --timeout default and the --reps help
(see perf/bench)."""

from . import (ab, chunk_sweep, hosts, lammps, m2m, osc, p2p, rdmach, rdmach_rc,
               resources, scaling, udz_ud, udzcopy, unimem)

SUITES = [rdmach, rdmach_rc, chunk_sweep, scaling, udzcopy, udz_ud, unimem, hosts, m2m, osc,
          lammps, p2p, resources, ab]
