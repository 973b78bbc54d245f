#!/usr/bin/env python3
"""Check swverbs' <infiniband/verbs.h> against rdma-core 65's, declaration by declaration.

The reference is rdma-core 65's public headers (infiniband/verbs.h with what it
includes: verbs_api.h, ib_user_ioctl_verbs.h, the kernel uAPI rdma/ib_user_verbs.h).
Their text is not in the repository; their facts are, in rdma65_abi.json (the digest).

--extract --reference DIR writes the digest from the headers:
1. clang parses them (-ast-dump=json) and lists what their files declare: enums and
   their enumerators, structs/unions and their members (nested and anonymous ones
   included), functions (extern and static inline) with their types, typedefs.
2. The preprocessor lists their macros (-dM): arity, and the identifier a macro
   aliases (the uAPI aliases such as `ibv_flow_action_esp`).
3. A probe program compiled against them prints every enumerator value, every struct
   size, every member offset and size, and every macro that is an integer constant.

The check (default) reads the digest:
4. One translation unit compiled against swverbs' header asserts each fact on a line
   of its own: the value or layout, and that each member, typedef and function has a
   type compatible with the reference's. Every failing line is one difference.
   Macros must be defined with the same arity; aliases must name the same identifier.
5. Members swverbs has that the reference lacks are differences too.
6. With --lib, libswverbs must export every function the reference declares that is
   not inline (a call swverbs does not implement still links, and answers EOPNOTSUPP).
7. With --reference as well, the digest must be what the headers give.

Exit codes: 0 pass, 1 difference or internal error (clang missing included).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# Guards against a test that passes because its digest is broken (rdma-core 65 gives
# 694 enumerators, 234 structs, 1431 members, 184 functions, 796 macros).
MINIMA = {"enumerators": 650, "records": 220, "members": 1350, "functions": 170,
          "macros": 750}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def ast_decls(clang, incdir, workdir, tag):
    """Top-level declarations of the files under incdir, from clang's JSON AST."""
    src = os.path.join(workdir, f"{tag}_ast.c")
    with open(src, "w") as f:
        f.write("#include <infiniband/verbs.h>\n")
    out = run([clang, "-I", incdir, "-Xclang", "-ast-dump=json", "-fsyntax-only", src])
    if out.returncode != 0:
        raise RuntimeError(f"clang cannot parse {tag} header:\n{out.stderr}")
    tree = json.loads(out.stdout)
    # clang prints a location's file only when it differs from the previous one it
    # printed, in document order: follow every "file" key in order.
    state = {"file": None}

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "includedFrom":
                    continue
                if k == "file":
                    state["file"] = v
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    root = os.path.realpath(incdir) + os.sep
    decls = []
    for node in tree.get("inner", []):
        walk(node.get("loc", {}))
        here = state["file"]
        for k, v in node.items():
            if k != "loc":
                walk(v)
        if here and os.path.realpath(here).startswith(root):
            decls.append(node)
    return decls


def record_members(node, prefix=""):
    """(path, qualType or None, is_bitfield) of every member, anonymous ones flattened."""
    out = []
    pending = None  # the last unnamed record defined, the type of the next field
    for c in node.get("inner", []):
        if c["kind"] == "RecordDecl":
            if c.get("completeDefinition") and not c.get("name"):
                pending = c
            continue
        if c["kind"] != "FieldDecl":
            continue
        qt = c.get("type", {}).get("qualType", "")
        name = c.get("name")
        unnamed_type = "(unnamed" in qt or "(anonymous" in qt
        if not name:  # anonymous struct/union member: its members are ours
            if pending is not None:
                out += record_members(pending, prefix)
            pending = None
            continue
        path = prefix + name
        out.append((path, None if unnamed_type else qt, bool(c.get("isBitfield"))))
        if unnamed_type and pending is not None:
            out += record_members(pending, path + ".")
        pending = None
    return out


def collect(decls):
    """Enums, enumerators, records, functions, typedefs, and the functions that are not
    inline (the library must export those)."""
    enums, enumerators, records, functions, typedefs = {}, [], {}, {}, {}
    extern_funcs = set()
    for n in decls:
        k = n["kind"]
        if k == "EnumDecl":
            if n.get("name"):
                enums[n["name"]] = True
            for c in n.get("inner", []):
                if c["kind"] == "EnumConstantDecl":
                    enumerators.append(c["name"])
        elif k == "RecordDecl" and n.get("completeDefinition") and n.get("name"):
            records[f'{n["tagUsed"]} {n["name"]}'] = record_members(n)
        elif k == "FunctionDecl":
            functions[n["name"]] = n["type"]["qualType"]
            inline = n.get("inline") or n.get("storageClass") == "static" or any(
                c["kind"] == "CompoundStmt" for c in n.get("inner", []))
            if not inline:
                extern_funcs.add(n["name"])
        elif k == "TypedefDecl":
            typedefs[n["name"]] = n["type"]["qualType"]
    return enums, enumerators, records, functions, typedefs, extern_funcs


MACRO_RE = re.compile(r"^#define (\w+)(\([^)]*\))? ?(.*)$")


def macros(cc, incdir, workdir, tag):
    src = os.path.join(workdir, f"{tag}_macros.c")
    with open(src, "w") as f:
        f.write("#include <infiniband/verbs.h>\n")
    out = run([cc, "-I", incdir, "-E", "-dM", src])
    if out.returncode != 0:
        raise RuntimeError(f"{cc} -dM failed on {tag}:\n{out.stderr}")
    res = {}
    for line in out.stdout.splitlines():
        m = MACRO_RE.match(line)
        if m:
            args = m.group(2)
            nargs = None if args is None else len([a for a in args[1:-1].split(",") if a.strip()])
            res[m.group(1)] = (nargs, m.group(3).strip())
    return res


def builtin_macros(cc, workdir):
    src = os.path.join(workdir, "empty.c")
    open(src, "w").close()
    out = run([cc, "-E", "-dM", src])
    return {MACRO_RE.match(l).group(1) for l in out.stdout.splitlines() if MACRO_RE.match(l)}


def compile_errors(cc, src, incdir, extra=()):
    out = run([cc, "-std=gnu11", "-fsyntax-only", "-fmax-errors=0", "-w", *extra, "-I", incdir,
               src])
    lines = set()
    for m in re.finditer(rf"^{re.escape(src)}:(\d+):(?:\d+:)? (?:fatal )?error:", out.stderr, re.M):
        lines.add(int(m.group(1)))
    return out.returncode, lines, out.stderr


def ref_values(cc, ref, workdir, enumerators, records, int_macro_candidates):
    """Run a probe against the reference; returns {fact: value}. Macros that are not
    integer constants are dropped (found by compiling, one candidate per line)."""
    cands = list(int_macro_candidates)
    for _ in range(6):
        src = os.path.join(workdir, "probe_ref.c")
        lines = ["#include <infiniband/verbs.h>", "#include <stdio.h>", "#include <stddef.h>",
                 "#define P(k, v) printf(\"%s %lld %d\\n\", k, (long long)(v), (v) < 0)",
                 "int main(void) {"]
        first_macro = len(lines) + 1
        for m in cands:
            lines.append(f'{{ enum {{ swv_probe = ({m}) }}; P("M {m}", {m}); }}')
        for e in enumerators:
            lines.append(f'P("E {e}", {e});')
        for key, members in records.items():
            lines.append(f'P("S {key}", sizeof({key}));')
            for path, qt, bit in members:
                if not bit:
                    lines.append(f'P("O {key} {path}", offsetof({key}, {path}));')
                    if not (qt or "").endswith("[]"):  # a flexible array has no size
                        lines.append(f'P("Z {key} {path}", sizeof((({key} *)0)->{path}));')
        lines.append("return 0; }")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        rc, bad, err = compile_errors(cc, src, ref)
        if rc == 0:
            break
        drop = {cands[i - first_macro] for i in bad if first_macro <= i < first_macro + len(cands)}
        if not drop:
            raise RuntimeError(f"reference probe does not compile:\n{err[:4000]}")
        cands = [c for c in cands if c not in drop]
    exe = os.path.join(workdir, "probe_ref")
    out = run([cc, "-std=gnu11", "-w", "-I", ref, src, "-o", exe])
    if out.returncode != 0:
        raise RuntimeError(f"reference probe does not build:\n{out.stderr}")
    vals = {}
    for line in run([exe], check=True).stdout.splitlines():
        fact, val, neg = line.rsplit(" ", 2)
        vals[fact] = (int(val), int(neg))
    return vals


def macro_facts(r_macros, builtin):
    """{name: [arity or None, aliased identifier or None]} and the integer candidates."""
    facts, int_cands = {}, []
    for name, (nargs, body) in sorted(r_macros.items()):
        if name in builtin:
            continue
        alias = None
        if nargs is None:
            if re.fullmatch(r"[A-Za-z_]\w*", body) and body not in r_macros:
                alias = body
            elif body:
                int_cands.append(name)
        facts[name] = [nargs, alias]
    return facts, int_cands


def extract(ref, cc, clang, workdir):
    """The digest: every fact of the reference the check needs, as JSON-able data."""
    enums, enumerators, records, funcs, typedefs, extern_funcs = collect(
        ast_decls(clang, ref, workdir, "ref"))
    mfacts, int_cands = macro_facts(macros(cc, ref, workdir, "ref"), builtin_macros(cc, workdir))
    vals = ref_values(cc, ref, workdir, enumerators, records, int_cands)
    return {
        "about": "rdma-core 65's <infiniband/verbs.h> and what it includes, as facts: "
                 "declared names, values, layouts, types (tests/layout/compare_rdma65.py "
                 "--extract writes it)",
        "enums": sorted(enums),
        "enumerators": enumerators,
        "records": {k: [list(m) for m in v] for k, v in records.items()},
        "functions": funcs,
        "extern_functions": sorted(extern_funcs),
        "typedefs": typedefs,
        "macros": mfacts,
        "values": {k: list(v) for k, v in vals.items()},
    }


def write_digest(d, path):
    # One fact per line, so that a change of the reference reads as a small diff.
    with open(path, "w") as f:
        f.write("{\n")
        keys = list(d)
        for i, k in enumerate(keys):
            v = d[k]
            f.write(f"{json.dumps(k)}: ")
            if isinstance(v, dict):
                f.write("{\n" + ",\n".join(f"  {json.dumps(a)}: {json.dumps(b)}"
                                          for a, b in v.items()) + "\n}")
            elif isinstance(v, list) and v:
                f.write("[\n" + ",\n".join(f"  {json.dumps(a)}" for a in v) + "\n]")
            else:
                f.write(json.dumps(v))
            f.write(",\n" if i + 1 < len(keys) else "\n")
        f.write("}\n")


def check(d, ours, cc, clang, workdir, lib):
    """Differences of swverbs' header (and library) from the digest d."""
    r_records = {k: [tuple(m) for m in v] for k, v in d["records"].items()}
    o_records = collect(ast_decls(clang, ours, workdir, "ours"))[2]
    o_macros = macros(cc, ours, workdir, "ours")

    counts = {"enumerators": len(d["enumerators"]), "records": len(r_records),
              "members": sum(len(m) for m in r_records.values()),
              "functions": len(d["functions"]), "macros": len(d["macros"])}
    errors = []
    for what, n in counts.items():
        if n < MINIMA[what]:
            errors.append(f"self-check: only {n} {what} in the digest "
                          f"(expected >= {MINIMA[what]}): the test itself is broken")

    # Macros: presence, kind, arity; identifier aliases by name.
    for name, (nargs, alias) in d["macros"].items():
        if name not in o_macros:
            errors.append(f"macro {name}: missing")
            continue
        onargs, obody = o_macros[name]
        if nargs != onargs:
            errors.append(f"macro {name}: "
                          f"{'object-like' if nargs is None else f'{nargs} parameter(s)'} in "
                          f"rdma-core, {'object-like' if onargs is None else f'{onargs}'} here")
        elif alias is not None and obody != alias:
            errors.append(f"macro {name}: expands to {obody!r}, rdma-core {alias!r}")

    checks = []  # (line text, description)
    for fact, (v, neg) in d["values"].items():
        kind, rest = fact.split(" ", 1)
        if kind in ("M", "E"):
            checks.append((f"_Static_assert(({rest}) == ({v}LL) && (({rest}) < 0) == {neg}, \"\");",
                           f"{'macro' if kind == 'M' else 'enumerator'} {rest}: "
                           f"rdma-core value {v}"))
        elif kind == "S":
            checks.append((f"_Static_assert(sizeof({rest}) == {v}, \"\");",
                           f"{rest}: size (rdma-core {v})"))
        elif kind == "O":
            key, path = rest.rsplit(" ", 1)
            checks.append((f"_Static_assert(offsetof({key}, {path}) == {v}, \"\");",
                           f"{key}.{path}: offset (rdma-core {v})"))
        elif kind == "Z":
            key, path = rest.rsplit(" ", 1)
            checks.append((f"_Static_assert(sizeof((({key} *)0)->{path}) == {v}, \"\");",
                           f"{key}.{path}: size (rdma-core {v})"))
    for e in d["enums"]:
        checks.append((f"_Static_assert(sizeof(enum {e}) > 0, \"\");", f"enum {e}: missing"))
    for key, members in r_records.items():
        for path, qt, bit in members:
            if qt and not bit:
                checks.append((f"_Static_assert(__builtin_types_compatible_p(__typeof__((({key} *)0)->{path}), __typeof__({qt})), \"\");",
                               f"{key}.{path}: type is not {qt}"))
        if key in o_records:
            extra = {p for p, _, _ in o_records[key]} - {p for p, _, _ in members}
            for p in sorted(extra):
                errors.append(f"{key}.{p}: member rdma-core 65 does not have")
    for name, qt in d["functions"].items():
        checks.append((f"_Static_assert(__builtin_types_compatible_p(__typeof__({name}), __typeof__({qt})), \"\");",
                       f"function {name}: missing or not {qt}"))
    for name, qt in d["typedefs"].items():
        checks.append((f"_Static_assert(__builtin_types_compatible_p({name}, __typeof__({qt})), \"\");",
                       f"typedef {name}: missing or not {qt}"))

    if lib:
        nm = run(["nm", "-D", "--defined-only", lib])
        if nm.returncode != 0:
            errors.append(f"nm -D {lib} failed: {nm.stderr.strip()}")
        exported = {l.split()[-1].split("@")[0] for l in nm.stdout.splitlines() if l.strip()}
        for name in sorted(set(d["extern_functions"]) - exported):
            errors.append(f"function {name}: declared by rdma-core 65 but not exported by {lib}")
        counts["exported functions"] = len(d["extern_functions"])

    src = os.path.join(workdir, "check_ours.c")
    head = ["#include <infiniband/verbs.h>", "#include <stddef.h>"]
    with open(src, "w") as f:
        f.write("\n".join(head + [c for c, _ in checks]) + "\n")
    rc, bad, err = compile_errors(cc, src, ours)
    for i in sorted(bad):
        idx = i - len(head) - 1
        if 0 <= idx < len(checks):
            errors.append(checks[idx][1])
        else:
            errors.append(f"check file line {i} does not compile (see {src})")
    if rc != 0 and not bad:
        errors.append(f"check file does not compile:\n{err}")
    return counts, len(checks), errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--digest", required=True,
                    help="the facts of rdma-core 65's header (tests/layout/rdma65_abi.json)")
    ap.add_argument("--reference",
                    help="directory holding rdma-core 65's infiniband/ and rdma/ headers: "
                         "with --extract, write the digest from it; otherwise also check that "
                         "the digest is what it gives")
    ap.add_argument("--extract", action="store_true")
    ap.add_argument("--ours", help="swverbs include directory")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--clang", default="clang")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--lib", help="libswverbs.so: must export every non-inline function")
    args = ap.parse_args()

    if shutil.which(args.clang) is None:
        print(f"FAIL: {args.clang} is not installed (apt-get install clang; "
              "tools/install-deps.sh test installs it)")
        return 1
    os.makedirs(args.workdir, exist_ok=True)
    ref = args.reference
    if ref and not os.path.exists(os.path.join(ref, "infiniband", "verbs.h")):
        print(f"FAIL: no infiniband/verbs.h under {ref}")
        return 1
    if args.extract:
        if not ref:
            ap.error("--extract needs --reference")
        write_digest(extract(ref, args.cc, args.clang, args.workdir), args.digest)
        print(f"wrote {args.digest} from {ref}")
        return 0
    if not args.ours:
        ap.error("checking needs --ours")
    with open(args.digest) as f:
        d = json.load(f)
    errors = []
    if ref:
        fresh = os.path.join(args.workdir, "fresh_digest.json")
        write_digest(extract(ref, args.cc, args.clang, args.workdir), fresh)
        with open(fresh) as f:
            if json.load(f) != d:
                errors.append(f"{args.digest} is not what {ref} gives (diff it against "
                              f"{fresh}; rewrite it with --extract)")
    counts, nchecks, more = check(d, args.ours, args.cc, args.clang, args.workdir, args.lib)
    errors += more
    print(f"compared against {args.digest}" + (f" and {ref}" if ref else "") + ": " +
          ", ".join(f"{n} {w}" for w, n in counts.items()) + f", {nchecks} compiled checks")
    if errors:
        for e in errors:
            print("RDMA-CORE 65 MISMATCH:", e)
        print(f"FAIL: {len(errors)} difference(s) from rdma-core 65's header")
        return 1
    print("PASS: swverbs' verbs.h declares everything rdma-core 65's does, with the same "
          "values, layouts and types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
