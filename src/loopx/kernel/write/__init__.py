"""kernel.write: the write operations (goals, todos, gates, evidence, agents, runs).

Importing this package registers the write layer's housekeeping with the storage layer (runs whose
lease ended are closed by the next writer), so storage never imports policy or write code.
"""

from loopx.kernel.storage.store import register_housekeeping
from loopx.kernel.write.runs import reap_drafts

register_housekeeping(reap_drafts)
