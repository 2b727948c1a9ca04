"""``loopx run``: drive an agent command through governed turns.

- ``presets``: the documented headless command line of each agent host.
- ``process``: run one agent process with the packet on stdin, a timeout, lease renewal ticks
  and clean Ctrl-C handling (the whole process group is stopped).
- ``lease``: the per-goal runner lock that keeps two runners off the same goal.
- ``loop``: should-run -> next -> agent -> verify -> evidence -> finish -> spend, repeated.
"""
