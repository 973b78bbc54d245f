#!/usr/bin/env python3
"""The layers of src/ at link level (check_layers.py checks the includes): an object
file of one layer may call functions and use data defined by its own layer and the
layers below, never one defined above. This catches what an include check cannot: a
call into a higher layer through a declaration left in a lower layer's header.

Usage: check_calls.py [--self-test] OBJECT... where each object is the build's
.../<dir>/<file>.c.o (the directory names its layer, ranks from layers.py).
Nothing is tolerated. Exit status 1 lists every violation.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layers import RANK, run  # noqa: E402

def layer_of(obj):
    d = os.path.basename(os.path.dirname(obj))
    return d, f"{d}/{os.path.basename(obj)[:-2]}"  # "core/qp.c.o" -> "core/qp.c"


def symbols(obj):
    out = subprocess.run(["nm", "-g", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
        elif len(f) == 3 and f[1] not in "Uw":
            defined.add(f[2])
    return defined, undefined


def violations(objs):
    where = {}  # symbol -> (layer, file) defining it
    uses = []
    for o in objs:
        d, name = layer_of(o)
        if d not in RANK:
            return [f"{o}: directory {d} not placed in a layer (layers.py)"]
        defined, undefined = symbols(o)
        for s in defined:
            where[s] = (d, name)
        uses.append((d, name, undefined))
    bad = []
    for d, name, undefined in uses:
        for s in sorted(undefined):
            if s in where and RANK[where[s][0]] > RANK[d]:
                bad.append(f"src/{name}: uses {s} of src/{where[s][1]}: {d} (layer {RANK[d]}) "
                           f"must not depend on {where[s][0]} (layer {RANK[where[s][0]]})")
    return bad


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        objs = []
        for d, src in (("util", "void up(void);\nvoid low(void) { up(); }\n"),
                       ("api", "void up(void) {}\n")):
            os.mkdir(os.path.join(t, d))
            c = os.path.join(t, d, "x.c")
            with open(c, "w") as fh:
                fh.write(src)
            subprocess.run(["cc", "-c", c, "-o", c + ".o"], check=True)
            objs.append(c + ".o")
        found = violations(objs)
    if len(found) != 1 or "util/x.c: uses up" not in found[0]:
        print("self-test: a planted util -> api call was not reported:", found)
        return 1
    return 0


def check(args):
    # CTest passes $<TARGET_OBJECTS:...> as one ';'-separated argument.
    objs = [o for a in args for o in a.split(";") if o]
    return violations(objs), f"no call against the layering in {len(objs)} objects"


if __name__ == "__main__":
    sys.exit(run("check_calls.py [--self-test] OBJECT...", None, self_test, check))
