#!/usr/bin/env python3
"""What both layering checks share: the rank of each directory of src/ (docs/design.md,
"Source tree = architecture") and their command line.

Layers, bottom to top -- the rank each directory of src/ has:
  util                            0  helpers with no knowledge of RDMA
  net                             1  configuration, addressing, netdev watch, fault injector
  link                            2  endpoints: UDP sockets and the intra-host link
  progress                        3  the progress loop: endpoints, timers, sleep and wake;
                                     what it receives and runs is its owner's (a table of
                                     calls registered at start)
  core                            4  verbs objects (device, context, pd, mr/mw, cq, srq, ah,
                                     xrcd, counters, the QP object and its queues)
  transport                       5  the protocol over the QP object: posting, requester,
                                     completer, responder, state changes that reset or
                                     flush it, the receive story (check, demux), timers,
                                     triggered WRs, multicast delivery, introspection
  api                             6  exported entry points
  preload, rdmacm                 7  libraries built on the public API
"""
import sys

RANK = {"util": 0, "net": 1, "link": 2, "progress": 3, "core": 4, "transport": 5,
        "api": 6, "preload": 7, "rdmacm": 7}


def run(usage, nargs, self_test, check):
    """The checks' command line: [--self-test] ARG... First, with --self-test, show
    that a planted violation is reported (the check can fail); then check(args) returns
    the violations and the line to print when there is none. nargs: how many ARGs, or
    None for one or more. Exit status 0, 1 listing every violation, 2 for bad usage."""
    args = sys.argv[1:]
    if args and args[0] == "--self-test":
        if self_test():
            return 1
        args = args[1:]
    if (len(args) != nargs) if nargs is not None else not args:
        print("usage:", usage, file=sys.stderr)
        return 2
    bad, fine = check(args)
    for b in bad:
        print(b)
    print(f"{len(bad)} violation(s) of the layering" if bad else fine)
    return 1 if bad else 0
