"""Sync through git: ``transport`` exchanges records and ledgers with a remote (refs under
``refs/loopx/``), ``streams`` finds the lines new since the last sync, ``shared`` linearises what
must not happen twice across machines (claims, gate decisions, spends, reservations), ``skew``
keeps leases safe from machines whose clocks disagree, and ``sharing`` is the one cheap read the
hot paths make. Layers: see docs/architecture.md."""
