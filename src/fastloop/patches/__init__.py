"""The patch records, one module each, registered in default-set order."""

from fastloop._registry import register
from fastloop.patches import add_callback, wakeup

register(add_callback.PATCH)
register(wakeup.PATCH)
