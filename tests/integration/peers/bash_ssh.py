"""A real bash behind the lab's SSH server (provisioner/lab/vtysh_ssh.py), for the NVUE and
SONiC shell driver's mechanics: commands with their exit status, files sent as base64 lines.

usage: python -m tests.integration.peers.bash_ssh PORT PASSWORD_FILE WORKDIR
"""

from __future__ import annotations

import os
import sys

from provisioner.lab.vtysh_ssh import serve

if __name__ == "__main__":
    os.chdir(sys.argv[3])
    # the prompt of a non-root switch login (the test runs as root, whose `#` prompt netmiko
    # would take for a sudo shell and try to leave on disconnect)
    serve(int(sys.argv[1]), ["/usr/bin/env", "PS1=admin@leaf01:~$ ", "/bin/bash", "--norc",
                             "--noprofile", "-i"], sys.argv[2])
