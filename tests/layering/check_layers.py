#!/usr/bin/env python3
"""The layers of src/ (docs/design.md, "Source tree = architecture"): a file may include
headers of its own layer and of the layers below it, never of a layer above.

The ranks are layers.py's table. An include of a directory that table does not know is
an error too, so a new layer must be placed there. Exit status 1 lists every violation.
With --self-test, checks that a planted upward include is reported (the check can fail).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layers import RANK, run  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# <dir/x.h> finds src/dir/x.h too (src/ is on the include path): such an include is a
# layer's when that file exists; otherwise it is a system header (<net/if.h>).
ANGLE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)


def violations(src):
    bad = []
    for d in sorted(os.listdir(src)):
        path = os.path.join(src, d)
        if not os.path.isdir(path):
            continue
        if d not in RANK:
            bad.append(f"src/{d}/: directory not placed in a layer (tests/layering/layers.py)")
            continue
        for f in sorted(os.listdir(path)):
            if not f.endswith((".c", ".h")):
                continue
            with open(os.path.join(path, f), encoding="utf-8") as fh:
                text = fh.read()
            angle = [i for i in ANGLE.findall(text) if os.path.isfile(os.path.join(src, i))]
            for inc in INCLUDE.findall(text) + angle:
                if "/" not in inc:
                    continue  # same directory
                top = inc.split("/", 1)[0]
                if top not in RANK:
                    if os.path.isdir(os.path.join(src, top)):
                        bad.append(f"src/{d}/{f}: includes {inc}: unknown layer {top}")
                    continue  # a header outside src/ (include/...)
                if RANK[top] > RANK[d]:
                    bad.append(f"src/{d}/{f}: includes {inc}: {d} (layer {RANK[d]}) "
                               f"must not depend on {top} (layer {RANK[top]})")
    return bad


def self_test():
    with tempfile.TemporaryDirectory() as t:
        for d in ("util", "api"):
            os.mkdir(os.path.join(t, d))
        with open(os.path.join(t, "api", "x.h"), "w") as fh:
            fh.write("#pragma once\n")
        with open(os.path.join(t, "util", "y.c"), "w") as fh:
            fh.write('#include "api/x.h"\n')
        with open(os.path.join(t, "util", "z.c"), "w") as fh:
            fh.write('#include <net/if.h>\n#include <api/x.h>\n')
        found = violations(t)
    if len(found) != 2 or "util/y.c" not in found[0] or "util/z.c" not in found[1]:
        print("self-test: a planted util -> api include was not reported:", found)
        return 1
    return 0


def check(args):
    held = ", ".join(f"{d}={r}" for d, r in sorted(RANK.items(), key=lambda x: x[1]))
    return violations(args[0]), "layering holds: " + held


if __name__ == "__main__":
    sys.exit(run("check_layers.py [--self-test] SRC_DIR", 1, self_test, check))
