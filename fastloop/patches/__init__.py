"""The patches, one module each: what fastloop changes in Tornado and asyncio.

``RECORDS`` names each patch, its target module and its own module, in
default-set order; the registry knows them by that row and imports a
patch's module only with its target (start-up pays for no patch whose
target the application never imports).  This package imports nothing.
"""

#: (name, target module, the patch's module, in the default set)
RECORDS = (
    ("add_callback", "tornado.platform.asyncio", f"{__name__}.add_callback", True),
    ("wakeup", "asyncio.selector_events", f"{__name__}.wakeup", True),
    ("write_to_fd", "tornado.iostream", f"{__name__}.write_to_fd", True),
    ("poll", "asyncio.selector_events", f"{__name__}.poll", True),
    ("switchinterval", "sys", f"{__name__}.switchinterval", False),
)
