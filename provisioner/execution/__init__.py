"""Ansible across execution nodes: ansible-runner's own streaming over SSH, no scheduler.

- shares.py   which execution node runs which hosts of a batch (whole racks per node)
- stream.py   one share: `transmit` here -> `ssh node ansible-runner worker` -> `process`
              here (events, artifacts and per-host stats as a local run has them)
- dispatch.py a batch over all nodes at once; a lost node's share retried once elsewhere
- doctor.py   is each node fit: SSH, versions matching the controller's, free disk
"""
