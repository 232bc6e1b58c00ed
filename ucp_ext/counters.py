#!/usr/bin/env python3
"""Reads the transport counter files of one run and checks them: the one Python reader.

With UCX_EXT_COUNTERS_DIR=<dir>, every process that loaded one of the project's transports writes
<dir>/<tl>.<pid> at exit, one "name value" per line (uct/common/ucx_ext_counters.h). Test tiers
and perf/bench use this module (as a command, or imported) to prove that a transport really
carried the traffic; C programs use ucp_ext_counters_expect() (ucp_ext/counters.c), which
follows the same file and expectation rules.

  counters DIR [TL]                     print the summed counters of TL (or of every transport)
  counters DIR --expect TL EXPR         exit 1 unless every condition in EXPR holds
                                        (--expect may come before DIR, and may be repeated)
  counters DIR --carried TL [--ranks N] [--quiet]
                                        exit 1 unless TL carried the run's traffic: at least one
                                        file (exactly N with --ranks N: every rank loaded TL and
                                        exited cleanly), active messages moved both ways (some
                                        tx_am_* > 0 and rx_am > 0), with --ranks every file shows
                                        traffic (tx_am_*, tx_put_*, tx_get_* or rx_am; a rank of
                                        a one-way test only receives), rx_corrupt 0 everywhere;
                                        prints one summary line (not with --quiet when it holds)

  counters DIR --report                 a table for a person: per transport that moved
                                        anything, messages and bytes per kind (active
                                        messages, put, get, atomics), what it received, the
                                        errors by name, and the paths its own counters tell
                                        (mpi_glue/launch --report prints it at the job's end)

  counters --serve DIR                  answer many calls from one process, for a machine where
                                        Python takes seconds to start (the verbs tier's guest
                                        under qemu's emulated CPU: 7.5 s a call). DIR holds two
                                        FIFOs the caller made, req and rep, and the server
                                        creates DIR/ready once it reads them. A call writes its
                                        arguments, each ended by NUL, then a newline, into req;
                                        the answer's stdout and stderr go to DIR/out and DIR/err,
                                        then its exit code and a newline to rep. A call of
                                        "--quit" ends the server.

EXPR: comma-separated "name OP number" (OP: > >= == < <= !=); "a>0|b>0" holds if either holds.
A name missing from the files counts as 0; no file at all for TL fails.
"""
import contextlib
import io
import os
import re
import sys
import traceback
from collections import OrderedDict

FILE_RE = re.compile(r'^(?P<tl>[A-Za-z0-9_]+)\.(?P<pid>[0-9]+)$')  # skips "<tl>.<pid>.tmp"
COND_RE = re.compile(r'^\s*([A-Za-z0-9_]+)\s*(>=|<=|==|!=|>|<)\s*([0-9]+)\s*$')
OPS = {'>': lambda a, b: a > b, '>=': lambda a, b: a >= b, '==': lambda a, b: a == b,
       '<': lambda a, b: a < b, '<=': lambda a, b: a <= b, '!=': lambda a, b: a != b}
MOVED_RE = re.compile(r'^(tx_am_|tx_put_|tx_get_)|^rx_am$')  # traffic sent or received


def read_file(path):
    """OrderedDict(name -> value) of one counter file."""
    values = OrderedDict()
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                values[parts[0]] = values.get(parts[0], 0) + int(parts[1])
    return values


def files(dirname, tl=None):
    """[(tl, path)] of the finished counter files in dirname (of transport tl only, if given)."""
    result = []
    for entry in sorted(os.listdir(dirname)):
        m = FILE_RE.match(entry)
        if m and (tl is None or m['tl'] == tl):
            result.append((m['tl'], os.path.join(dirname, entry)))
    return result


def read(dirname):
    """{tl: (files, OrderedDict(name -> sum))}"""
    result = {}
    for tl, path in files(dirname):
        nfiles, sums = result.get(tl, (0, OrderedDict()))
        for name, value in read_file(path).items():
            sums[name] = sums.get(name, 0) + value
        result[tl] = (nfiles + 1, sums)
    return result


def sums(dirname, tl):
    """{name: sum} over the files of tl in dirname; {} when there is none or no such dir."""
    try:
        return dict(read(dirname).get(tl, (0, {}))[1])
    except OSError:
        return {}


def check(all_counters, tl, expr):
    """Returns a list of failure strings (empty if every condition holds)."""
    if tl not in all_counters:
        return ['no %s.<pid> counter file (transport not loaded?)' % tl]
    totals = all_counters[tl][1]
    failures = []
    for cond in filter(None, (c.strip() for c in expr.split(','))):
        failed = []
        for alt in cond.split('|'):
            m = COND_RE.match(alt)
            if not m:
                failed.append("bad condition '%s'" % alt)
                continue
            name, op, want = m.group(1), m.group(2), int(m.group(3))
            value = totals.get(name, 0)
            if OPS[op](value, want):
                break
            failed.append('%s (is %d)' % (alt.strip(), value))
        else:
            failures.append(' | '.join(failed))
    return failures


def carried(dirname, tl, ranks=None):
    """(ok, message): did tl carry the run's traffic (see --carried)? message starts with
    'counters: ' and names every reason on failure."""
    try:
        paths = [p for _, p in files(dirname, tl)]
    except OSError:
        paths = []
    if not paths:
        return False, ('counters: no %s counter file in %s: no rank loaded %s, or none exited '
                       'cleanly' % (tl, dirname, tl))
    per_file = [(p, read_file(p)) for p in paths]
    total = {}
    for _, values in per_file:
        for name, value in values.items():
            total[name] = total.get(name, 0) + value

    def sum_of(*names):
        return sum(total.get(n, 0) for n in names)

    am = sum_of('tx_am_short', 'tx_am_bcopy', 'tx_am_zcopy')
    msg = ('%s: %d files, am tx %d rx %d, put %d, get %d, tx %d bytes, no_resource %d, '
           'pending %d, peer_failed %d' % (
               tl, len(paths), am, sum_of('rx_am'),
               sum_of('tx_put_short', 'tx_put_bcopy', 'tx_put_zcopy'),
               sum_of('tx_get_bcopy', 'tx_get_zcopy'), sum_of('tx_bytes'),
               sum_of('tx_no_resource'), sum_of('pending_add'), sum_of('peer_failed')))
    bad = ''
    if ranks is not None and len(paths) != ranks:
        bad += '; %d counter files for %d ranks' % (len(paths), ranks)
    if am == 0 or sum_of('rx_am') == 0:
        bad += '; no active messages moved (silent fallback?)'
    for path, values in per_file:
        if values.get('rx_corrupt', 0) > 0:
            bad += '; rx_corrupt %d in %s' % (values['rx_corrupt'], path)
    if ranks is not None:
        for path, values in per_file:
            if not sum(v for n, v in values.items() if MOVED_RE.match(n)):
                bad += '; %s moved nothing over %s' % (path, tl)
    if bad:
        return False, 'counters: FAIL ' + msg + bad
    return True, 'counters: ' + msg


# Counters that are errors when not 0 (by name), and those that tell a transport's paths.
ERROR_RE = re.compile(r'corrupt|fail|refused|timeouts|retry_exceeded|zcut')
PATHS = {
    'rdmach': ['rma_mapped', 'atomic_cpu', 'atomic_served', 'rma_served', 'rma_revoked',
               'served', 'wire_posts',
               'wire_atomics', 'sleeps'],
    'ud_zcopy': ['rx_zcopy_bytes', 'rx_copy_bytes', 'retransmit', 'chan_zc_dgrams', 'peers'],
    'unimem': ['zdma_writes', 'zdma_reads', 'zdma_bytes', 'mbox_msgs'],
}


def human(n):
    for unit, div in (('GB', 1e9), ('MB', 1e6), ('KB', 1e3)):
        if n >= div:
            return '%.1f %s' % (n / div, unit)
    return '%d B' % n


def report(dirname):
    """The --report table (a string)."""
    all_counters = read(dirname)
    rows, notes = [], []
    for tl in sorted(all_counters):
        nfiles, t = all_counters[tl]
        moved = sum(v for n, v in t.items() if MOVED_RE.match(n)) + t.get('tx_atomic', 0)
        if not moved:
            continue
        g = lambda *names: sum(t.get(n, 0) for n in names)  # noqa: E731
        put_b, get_b = g('tx_put_bytes'), g('tx_get_bytes')
        am_b = max(0, g('tx_bytes') - put_b - get_b)
        rows.append((tl, nfiles,
                     '%d / %s' % (g('tx_am_short', 'tx_am_bcopy', 'tx_am_zcopy'), human(am_b)),
                     '%d / %s' % (g('tx_put_short', 'tx_put_bcopy', 'tx_put_zcopy'),
                                  human(put_b)),
                     '%d / %s' % (g('tx_get_bcopy', 'tx_get_zcopy'), human(get_b)),
                     '%d' % g('tx_atomic'),
                     '%d / %s' % (g('rx_am'), human(g('rx_bytes'))),
                     '%d' % g('tx_no_resource')))
        errors = ['%s %d' % (n, v) for n, v in t.items() if v and ERROR_RE.search(n)]
        paths = ['%s %d' % (n, t[n]) for n in PATHS.get(tl, []) if t.get(n)]
        notes.append('  %s: errors: %s%s' % (tl, ', '.join(errors) or 'none',
                                             ('; paths: ' + ', '.join(paths)) if paths else ''))
    head = ('transport', 'procs', 'am sent (msgs / bytes)', 'put (ops / bytes)',
            'get (ops / bytes)', 'atomics', 'am received', 'no_resource')
    if not rows:
        return 'transport report: no project transport moved anything (counters in %s)' % dirname
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    fmt = '  '.join('%%-%ds' % w for w in widths)
    lines = ['transport report, summed over the processes (raw counters, one file per process '
             'and transport: %s; the served atomics\' records count as am received)' % dirname,
             fmt % head]
    lines += [fmt % r for r in rows]
    return '\n'.join(l.rstrip() for l in lines + notes)


def call(argv):
    """(exit code, stdout, stderr) of main(argv), as a process of its own would give them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                rc = e.code
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except Exception:  # noqa: BLE001 (the server outlives a call's bug: reported as its error)
            traceback.print_exc()
            rc = 1
    return rc or 0, out.getvalue(), err.getvalue()


def serve(dirname):
    """--serve DIR (see the module's text). Both FIFOs stay open read-write here, so that a
    caller's open never waits and a request written before this reads it is not lost."""
    req = os.fdopen(os.open(os.path.join(dirname, 'req'), os.O_RDWR), 'rb')
    rep = os.open(os.path.join(dirname, 'rep'), os.O_RDWR)
    open(os.path.join(dirname, 'ready'), 'w').close()
    while True:
        line = req.readline()
        argv = [a.decode() for a in line.rstrip(b'\n').split(b'\0')[:-1]]
        if argv == ['--quit']:
            return 0
        rc, out, err = call(argv)
        for name, text in (('out', out), ('err', err)):
            with open(os.path.join(dirname, name), 'w') as f:
                f.write(text)
        os.write(rep, b'%d\n' % rc)


def main(argv):
    if len(argv) == 2 and argv[0] == '--serve':
        return serve(argv[1])
    expects, positional = [], []
    carried_tl, ranks, quiet, want_report = None, None, False, False
    i = 0
    while i < len(argv):
        if argv[i] == '--expect':
            if i + 2 >= len(argv):
                sys.exit('counters: --expect needs TL and EXPR')
            expects.append((argv[i + 1], argv[i + 2]))
            i += 3
        elif argv[i] in ('--carried', '--ranks'):
            if i + 1 >= len(argv):
                sys.exit('counters: %s needs a value' % argv[i])
            if argv[i] == '--carried':
                carried_tl = argv[i + 1]
            else:
                ranks = int(argv[i + 1])
            i += 2
        elif argv[i] == '--quiet':
            quiet = True
            i += 1
        elif argv[i] == '--report':
            want_report = True
            i += 1
        elif argv[i] in ('-h', '--help'):
            print(__doc__)
            return 0
        else:
            positional.append(argv[i])
            i += 1
    if not positional or len(positional) > 2 or (carried_tl and (expects or len(positional) > 1)):
        sys.exit(__doc__)
    dirname = positional[0]
    if want_report:
        try:
            print(report(dirname))
        except OSError as e:
            sys.exit('counters: cannot read %s: %s' % (dirname, e))
        return 0

    if carried_tl:
        ok, msg = carried(dirname, carried_tl, ranks)
        if not ok or not quiet:
            print(msg)
        return 0 if ok else 1

    only_tl = positional[1] if len(positional) > 1 else None
    try:
        all_counters = read(dirname)
    except OSError as e:
        sys.exit('counters: cannot read %s: %s' % (dirname, e))

    if expects:
        status = 0
        for tl, expr in expects:
            failures = check(all_counters, tl, expr)
            if failures:
                print('counters: %s in %s: %s' % (tl, dirname, '; '.join(failures)))
                status = 1
        return status

    tls = [only_tl] if only_tl else sorted(all_counters)
    for tl in tls:
        if tl not in all_counters:
            print('counters: no %s.<pid> file in %s' % (tl, dirname), file=sys.stderr)
            return 1
        nfiles, totals = all_counters[tl]
        print('# %s: %d process(es)' % (tl, nfiles))
        for name, value in totals.items():
            print('%s %d' % (name, value) if only_tl else '%s %s %d' % (tl, name, value))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
