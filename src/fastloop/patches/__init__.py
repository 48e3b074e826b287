"""The patch records, one module each, registered in default-set order."""

from fastloop._registry import register
from fastloop.patches import add_callback, poll, switchinterval, wakeup, write_to_fd

register(add_callback.PATCH)
register(wakeup.PATCH)
register(write_to_fd.PATCH)
register(poll.PATCH)
register(switchinterval.PATCH, default=False)
