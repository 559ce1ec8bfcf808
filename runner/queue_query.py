"""The hypothesis queue's reader, which lives in the data layer (kb/store/queue.py, whose doc gives
the queue order); re-exported here for the callers that know it from runner."""

from kb.store.queue import OPEN_STATUSES as OPEN_STATUSES
from kb.store.queue import PERSON_TIER as PERSON_TIER
from kb.store.queue import QUEUE_ORDER as QUEUE_ORDER
from kb.store.queue import WAITING as WAITING
from kb.store.queue import WAITS_BEHIND as WAITS_BEHIND
from kb.store.queue import QueueFilter as QueueFilter
from kb.store.queue import QueuePage as QueuePage
from kb.store.queue import QueueRow as QueueRow
from kb.store.queue import queue_ids as queue_ids
from kb.store.queue import queue_page as queue_page
from kb.store.queue import queue_row as queue_row
