"""The pre-tool guard: reads a tool call (a shell command, a file edit) and says whether it is a
protected action of a goal. ``shell`` reads a command into simple commands, ``gitpush`` resolves
where a push lands as git would, ``verdicts`` maps each to a gate kind and gives the verdict,
``owned`` and ``measuring`` name the governance paths (what loopx installed for the hosts, an
experiment's measuring). Layers: see docs/architecture.md."""
