#!/usr/bin/env python3
"""Compare struct/union layouts of swverbs' <infiniband/verbs.h> with Debian's.

Every struct and union that Debian's /usr/include/infiniband/verbs.h defines
is looked up in both headers: one tiny translation unit is compiled against
each header with full debug info, gdb prints every type with `ptype /o`, and
the size plus the offset and size of every (nested) member are compared.
A member Debian has and swverbs lacks, or one at another offset or with
another size, is a failure. Members only swverbs has are allowed (rdma-core 65
added some), and so is a larger size for the structs rdma-core 65 grew.

Exit codes: 0 pass, 1 difference or internal error, 77 skipped (no Debian
header or no gdb), as registered with SKIP_RETURN_CODE in CMakeLists.txt.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

SKIP = 77

# Structs rdma-core 65 grew at the end relative to 44, with the size swverbs
# must have. Any other size change is a failure.
GROWN_AT_END = {
    "ibv_port_attr": 56,  # + active_speed_ex
    "ibv_qp_ex": 360,     # + wr_flush
}

# Structs that grow at the front: binaries address them from the end (the
# ibv_context is the last member), so offsets are compared from the end.
GROWN_AT_FRONT = {
    "verbs_context": 696,  # + free_buf ... alloc_dmah (six ops)
}

# Guards against the test passing because the parser or the struct list broke
# (Debian 12 gives 100 types and 1080 members):
# at least this many types and fields must be compared ...
MIN_TYPES = 95
MIN_FIELDS = 1000
# ... and these facts (verbs-clients.md 1.5) must be seen in Debian's layout.
KNOWN_DEBIAN = [
    ("struct ibv_context", "abi_compat", 320),
    ("struct ibv_context", "ops.post_send", 208),
    ("struct ibv_qp_ex", "wr_id", 168),
    ("struct ibv_cq_ex", "read_completion_wallclock_ns", 280),
    ("struct ibv_send_wr", "wr.atomic.rkey", 64),
    ("struct verbs_context", "sz", 312),
]

TYPE_RE = re.compile(r"^\s*(struct|union)\s+(\w+)\s*\{", re.M)
ALIAS_RE = re.compile(r"^#define\s+(ibv_\w+)\s+(ib_uverbs_\w+)\s*$", re.M)
MEMBER_RE = re.compile(r"^/\*\s+(?:(\d+)(?::\s*\d+)?\s+\|\s+)?(\d+)\s+\*/\s+(.*)$")
TOTAL_RE = re.compile(r"/\*\s*total size \(bytes\):\s*(\d+)\s*\*/")
CLOSE_RE = re.compile(r"^\s*}\s*(\w*)\s*;?\s*$")
HEAD_RE = re.compile(r"type = (struct|union) (\w+) \{$")


def die_skip(msg):
    bar = "!" * 72
    print(f"{bar}\nSKIP: layout test not run: {msg}\n{bar}", flush=True)
    sys.exit(SKIP)


def member_name(decl):
    """Name declared by one gdb member line (pointer, array, function pointer)."""
    decl = decl.rstrip(";").strip()
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)  # function pointer / pointer to array
    if m:
        return m.group(1)
    decl = re.sub(r"(\s*\[[^\]]*\])+$", "", decl)   # array bounds
    m = re.search(r"(\w+)\s*(?::\s*\d+)?$", decl)   # bitfield width
    return m.group(1) if m else None


def parse_ptype(text):
    """gdb `ptype /o` output -> {"struct X": (size, {path: (offset, size)})}."""
    types = {}
    stack = []
    for line in text.splitlines():
        h = HEAD_RE.search(line)
        if h and not stack:
            stack.append({"key": f"{h.group(1)} {h.group(2)}", "off": 0,
                          "union": h.group(1) == "union", "fields": {}, "total": None})
            continue
        if not stack:
            continue
        t = TOTAL_RE.search(line)
        if t:
            stack[-1]["total"] = int(t.group(1))
            continue
        m = MEMBER_RE.match(line)
        if m:
            frame = stack[-1]
            off = int(m.group(1)) if m.group(1) is not None else frame["off"]
            size = int(m.group(2))
            decl = m.group(3).strip()
            if decl.endswith("{"):
                stack.append({"off": off, "size": size, "union": decl.startswith("union"),
                              "fields": {}, "total": None})
            else:
                name = member_name(decl)
                if name is None:
                    raise ValueError(f"cannot parse member line: {line!r}")
                frame["fields"][name] = (off, size)
            continue
        c = CLOSE_RE.match(line)
        if c:
            frame = stack.pop()
            if not stack:  # end of the top-level type
                if frame["total"] is None:
                    raise ValueError(f"no total size for {frame['key']}")
                types[frame["key"]] = (frame["total"], frame["fields"])
                continue
            name = c.group(1)
            parent = stack[-1]["fields"]
            prefix = name + "." if name else ""
            if name:
                parent[name] = (frame["off"], frame["size"])
            for path, val in frame["fields"].items():
                parent[prefix + path] = val
    if stack:
        raise ValueError("unterminated type in gdb output")
    return types


def dump_layouts(cc, gdb, workdir, tag, include_dirs, keys):
    src = os.path.join(workdir, f"{tag}.c")
    obj = os.path.join(workdir, f"{tag}.o")
    with open(src, "w") as f:
        f.write("#include <infiniband/verbs.h>\nint swv_layout_anchor;\n")
    cmd = [cc, "-g", "-O0", "-fno-eliminate-unused-debug-types", "-c", src, "-o", obj]
    for d in include_dirs:
        cmd[1:1] = ["-I", d]
    subprocess.run(cmd, check=True)
    script = os.path.join(workdir, f"{tag}.gdb")
    with open(script, "w") as f:
        f.write("set width 0\nset height 0\nset print type hex off\n")
        for k in keys:
            f.write(f"echo @@TYPE {k}\\n\nptype /o {k}\n")
    out = subprocess.run([gdb, "-batch", "-nx", "-x", script, obj],
                         capture_output=True, text=True, check=False)
    result, missing = {}, []
    for chunk in (out.stdout + out.stderr).split("@@TYPE ")[1:]:
        key, _, body = chunk.partition("\n")
        parsed = parse_ptype(body)
        if key.strip() in parsed:
            result[key.strip()] = parsed[key.strip()]
        else:
            missing.append(key.strip())
    return result, missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="swverbs include directory")
    ap.add_argument("--debian", default="/usr/include/infiniband/verbs.h")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--gdb", default="gdb")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()

    if not os.path.exists(args.debian):
        die_skip(f"{args.debian} is missing. Install Debian's libibverbs-dev "
                 "(the project's test command does so when run as root).")
    if shutil.which(args.gdb) is None:
        die_skip("gdb is not installed (apt-get install gdb).")
    os.makedirs(args.workdir, exist_ok=True)

    with open(args.debian) as f:
        deb_text = f.read()
    names = sorted(set(TYPE_RE.findall(deb_text)))
    # verbs_api.h renames some ibv_ types to their kernel uAPI names.
    aliases = {}
    api = os.path.join(os.path.dirname(args.debian), "verbs_api.h")
    if os.path.exists(api):
        with open(api) as f:
            aliases = dict(ALIAS_RE.findall(f.read()))
    ours_keys = [f"{k} {n}" for k, n in names]
    deb_keys = [f"{k} {aliases.get(n, n)}" for k, n in names]

    deb_dir = os.path.dirname(os.path.dirname(args.debian))
    deb, deb_missing = dump_layouts(args.cc, args.gdb, args.workdir, "debian", [deb_dir], deb_keys)
    ours, ours_missing = dump_layouts(args.cc, args.gdb, args.workdir, "swverbs", [args.ours],
                                      ours_keys)

    errors = []
    for k in deb_missing:
        errors.append(f"{k}: not found in Debian's debug info (test setup broken)")
    for k in ours_missing:
        errors.append(f"{k}: declared by Debian's verbs.h but missing from swverbs'")

    for key, field, want in KNOWN_DEBIAN:
        got = deb.get(key, (0, {}))[1].get(field, (None,))[0]
        if got != want:
            errors.append(f"self-check: Debian {key}.{field} parsed at {got}, expected {want}")

    ntypes = nfields = 0
    for ok, dk in zip(ours_keys, deb_keys):
        if ok not in ours or dk not in deb:
            continue
        name = ok.split()[1]
        osize, ofields = ours[ok]
        dsize, dfields = deb[dk]
        ntypes += 1
        if name in GROWN_AT_END:
            want = GROWN_AT_END[name]
            if osize != want:
                errors.append(f"{ok}: size {osize}, expected {want} (Debian {dsize} + 65 additions)")
        elif name in GROWN_AT_FRONT:
            want = GROWN_AT_FRONT[name]
            if osize != want:
                errors.append(f"{ok}: size {osize}, expected {want} (Debian {dsize} + 65 additions)")
        elif osize != dsize:
            errors.append(f"{ok}: size {osize}, Debian {dsize}")
        for path, (doff, dsz) in sorted(dfields.items(), key=lambda kv: kv[1]):
            nfields += 1
            if path not in ofields:
                errors.append(f"{ok}.{path}: missing (Debian: offset {doff}, size {dsz})")
                continue
            ooff, osz = ofields[path]
            if name in GROWN_AT_FRONT:  # compare distance from the end
                ooff, doff = osize - ooff, dsize - doff
                what = "bytes before end"
            else:
                what = "offset"
            if ooff != doff or osz != dsz:
                errors.append(f"{ok}.{path}: {what} {ooff} size {osz}; Debian {what} {doff} size {dsz}")

    if ntypes < MIN_TYPES or nfields < MIN_FIELDS:
        errors.append(f"only {ntypes} types / {nfields} fields compared "
                      f"(expected >= {MIN_TYPES} / {MIN_FIELDS}): the test itself is broken")

    print(f"compared {ntypes} structs/unions and {nfields} members against {args.debian}")
    if errors:
        for e in errors:
            print("LAYOUT MISMATCH:", e)
        print(f"FAIL: {len(errors)} layout difference(s)")
        return 1
    print("PASS: every Debian struct/union has the same layout in swverbs' verbs.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
