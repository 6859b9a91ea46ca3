"""python tests/helpers/peak_rss.py OUT CAP_MIB CMD...: run CMD with its data capped at CAP_MIB (0: no
cap), write its peak resident memory in KiB to OUT, and exit with its exit code.

The cap is RLIMIT_DATA (heap and private writable mappings: what a process fills), not RLIMIT_AS:
torch reserves address space it never touches, so an address-space cap fails imports, not data.

Why a process of its own: a child's ru_maxrss includes the memory of the process it was forked from
(the kernel carries the old image's peak across exec), so a child of pytest would count pytest's
hundreds of MB. This small launcher forks the command instead: its floor is this interpreter's ~10 MB.
"""

import os
import resource
import sys

out, cap, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if cap:
    resource.setrlimit(resource.RLIMIT_DATA, (cap * 2**20, cap * 2**20))
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write(f"{usage.ru_maxrss}\n")
sys.exit(os.waitstatus_to_exitcode(status))
