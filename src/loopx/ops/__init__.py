"""Operations on an installation and a store: ``doctor`` (checks and safe fixes), ``storescan``
(a full integrity scan that works on a broken store) and ``update`` (install-channel detection,
plan, apply with a smoke check and rollback). No CLI imports; the commands are thin clients."""
